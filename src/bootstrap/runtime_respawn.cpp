// Runtime::respawn (respawn.h): the controller replaces lost ranks with new
// processes in spare slots and has every live rank admit them.
#include <algorithm>

#include "bootstrap/lifecycle.h"
#include "bootstrap/respawn.h"
#include "bootstrap/runtime_mpi.h"
#include "crown/bootstrap/runtime.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown {

using namespace std::chrono_literals;

std::vector<Rank> Runtime::respawn(const std::vector<Rank>& lost) {
  if (topology_.rank != 0) throw ConfigError("respawn: only the controller (rank 0) starts ranks");
  std::lock_guard lock(respawnMutex_);
  std::string refusal = detail::spawnRefusal();
  if (!refusal.empty()) throw Error("cannot replace lost ranks: " + refusal);
  Proc& proc = *proc_;
  auto joinedOnce = [this](Rank rank) {  // launched, or a replacement: not a vacant slot
    return rank < topology_.size || std::find(joined_.begin(), joined_.end(), rank) != joined_.end();
  };
  // A rank replaced already (through another mesh that held it) keeps its
  // replacement: the last of the chain, started anew only if that one is lost too.
  auto latest = [this](Rank rank) {
    for (auto it = replacedBy_.find(rank); it != replacedBy_.end(); it = replacedBy_.find(rank))
      rank = it->second;
    return rank;
  };
  std::size_t needed = 0;
  for (Rank rank : lost) {
    if (!joinedOnce(rank) || proc.alive(rank)) {
      throw ConfigError("respawn: rank " + std::to_string(rank) + " is not a lost rank");
    }
    if (!proc.alive(latest(rank))) ++needed;
  }
  Rank spare = topology_.slots - nextSlot_;
  if (needed > spare) {
    throw Error("respawn: " + std::to_string(needed) + " lost ranks, but only " +
                std::to_string(spare) +
                " spare rank slots are left (CROWN_SPARE_RANKS sets how many a job "
                "has; by default as many as it launched)");
  }
  auto timeout = env::millis("CROWN_RESPAWN_TIMEOUT_MS", 60s);
  auto& lifecycle = detail::Lifecycle::of(proc);
  std::vector<Rank> made;
  for (Rank given : lost) {
    Rank old = latest(given);
    if (proc.alive(old)) {
      made.push_back(old);
      continue;
    }
    Rank slot = nextSlot_++;  // spent even on failure: a process may have started in it
    detail::JoinOffer offer{std::string(secret_.begin(), secret_.end()), slot, topology_.slots,
                            topology_.size, {}, slotAddresses_, {}, {}};
    for (Rank r = 0; r < topology_.slots; ++r) {
      offer.hosts.push_back(proc.host(r));
      if (joinedOnce(r) && !proc.alive(r)) offer.lost.push_back(r);
    }
    for (Rank r : joined_) {
      if (proc.alive(r)) offer.joined.push_back(r);
    }
    detail::JoinAnswer answer;
    auto started = std::chrono::steady_clock::now();
    try {
      onMpiThread([&] {
        try {
          answer = detail::spawnReplacement(offer, proc.host(old), timeout);
        } catch (const detail::SpawnAbandoned& e) {
          // Still on the service thread, which must not call MPI again.
          mpi_->service->markUnusable(
              "MPI is unusable on the controller: respawn_lost() abandoned " + e.cause());
          throw;
        }
      });
    } catch (const detail::SpawnAbandoned& e) {
      // Every rank stops waiting for the controller in MPI, and the job
      // still ends (SHT-1): shutdown skips MPI's barrier and MPI_Finalize.
      lifecycle.mpiUnusable("respawn_lost() abandoned " + e.cause());
      throw;
    }
    if (!answer.error.empty()) {
      throw BootstrapError("respawn: the process started to replace rank " + std::to_string(old) +
                           " cannot join: " + answer.error);
    }
    proc.admitRank(slot, answer.host, answer.address);
    slotAddresses_[slot] = answer.address;
    joined_.push_back(slot);
    replacedBy_[old] = slot;
    // Every other live rank admits it before anything is sent to it through them.
    std::vector<Future<void>> acks;
    for (Rank r = 1; r < topology_.slots; ++r) {
      if (r != slot && proc.alive(r)) {
        acks.push_back(proc.request<void>({r, lifecycle.agentId()},
                                          detail::RankJoined{slot, answer.host, answer.address}));
      }
    }
    detail::awaitAcks(acks, env::millis("CROWN_CONNECT_TIMEOUT_MS", 10s), "the new rank");
    log::get().info("rank {} (on {}) replaces lost rank {}, in {} ms", slot, answer.host, old,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count());
    made.push_back(slot);
  }
  return made;
}

}  // namespace crown
