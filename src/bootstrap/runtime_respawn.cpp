// Runtime::respawn and Runtime::spawnProcs (respawn.h): the controller starts
// processes in spare slots and has every live rank admit them; a joining
// process's own bootstrap (joinAsReplacement); and Runtime::stopSpawned
// ends spawned ones.
#include <algorithm>
#include <thread>

#include "bootstrap/lifecycle.h"
#include "bootstrap/respawn.h"
#include "bootstrap/runtime_mpi.h"
#include "crown/bootstrap/runtime.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown {

using namespace std::chrono_literals;

detail::JoinOffer Runtime::offerFor(Rank slot) const {
  const Proc& proc = *proc_;
  detail::JoinOffer offer{std::string(secret_.begin(), secret_.end()), slot, topology_.slots,
                          topology_.size, {}, slotAddresses_, {}, {}};
  for (Rank r = 0; r < topology_.slots; ++r) {
    offer.hosts.push_back(proc.host(r));
    if (proc.joined(r) && !proc.alive(r)) offer.lost.push_back(r);
  }
  for (Rank r : joined_) {
    if (proc.alive(r)) offer.joined.push_back(r);
  }
  return offer;
}

void Runtime::admitJoined(const std::vector<Rank>& slots,
                          const std::vector<detail::JoinAnswer>& answers) {
  Proc& proc = *proc_;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    proc.admitRank(slots[i], answers[i].host, answers[i].address);
    slotAddresses_[slots[i]] = answers[i].address;
    joined_.push_back(slots[i]);
  }
  // Every live rank, the new ones among them, learns of each new one.
  auto& lifecycle = detail::Lifecycle::of(proc);
  std::vector<Future<void>> acks;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    lifecycle.askLiveRanks(detail::RankJoined{slots[i], answers[i].host, answers[i].address},
                           [&](Rank r) { return r == slots[i]; }, acks);
  }
  detail::awaitAcks(acks, env::millis("CROWN_CONNECT_TIMEOUT_MS", 10s), "the new rank");
}

void Runtime::spawnOnMpiThread(const std::string& what, const std::function<void()>& fn) {
  try {
    onMpiThread([&] {
      try {
        fn();
      } catch (const detail::SpawnAbandoned& e) {
        // Still on the service thread, which must not call MPI again.
        mpi_->service->markUnusable("MPI is unusable on the controller: " + what +
                                    " abandoned " + e.cause());
        throw;
      }
    });
  } catch (const detail::SpawnAbandoned& e) {
    // Every rank stops waiting for the controller in MPI, and the job
    // still ends (SHT-1): shutdown skips MPI's barrier and MPI_Finalize.
    detail::Lifecycle::of(*proc_).mpiUnusable(what + " abandoned " + e.cause());
    throw;
  }
}

std::vector<Rank> Runtime::respawn(const std::vector<Rank>& lost) {
  if (topology_.rank != 0) throw ConfigError("respawn: only the controller (rank 0) starts ranks");
  std::lock_guard lock(respawnMutex_);
  std::string refusal = detail::spawnRefusal();
  if (!refusal.empty()) throw Error("cannot replace lost ranks: " + refusal);
  Proc& proc = *proc_;
  // A rank replaced already (through another mesh that held it) keeps its
  // replacement: the last of the chain, started anew only if that one is lost too.
  auto latest = [this](Rank rank) {
    for (auto it = replacedBy_.find(rank); it != replacedBy_.end(); it = replacedBy_.find(rank))
      rank = it->second;
    return rank;
  };
  std::size_t needed = 0;
  for (Rank rank : lost) {
    if (!proc.joined(rank) || proc.alive(rank)) {
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
  std::vector<Rank> made;
  for (Rank given : lost) {
    Rank old = latest(given);
    if (proc.alive(old)) {
      made.push_back(old);
      continue;
    }
    Rank slot = nextSlot_++;  // spent even on failure: a process may have started in it
    detail::JoinOffer offer = offerFor(slot);
    detail::JoinAnswer answer;
    auto started = std::chrono::steady_clock::now();
    spawnOnMpiThread("respawn_lost()", [&] {
      answer = detail::spawnReplacement(offer, proc.host(old), timeout);
    });
    if (!answer.error.empty()) {
      throw BootstrapError("respawn: the process started to replace rank " + std::to_string(old) +
                           " cannot join: " + answer.error);
    }
    admitJoined({slot}, {answer});
    replacedBy_[old] = slot;
    log::get().info("rank {} (on {}) replaces lost rank {}, in {} ms", slot, answer.host, old,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - started)
                        .count());
    made.push_back(slot);
  }
  return made;
}

std::vector<Rank> Runtime::reserveProcs(std::size_t count) {
  if (topology_.rank != 0) throw ConfigError("spawn_procs: only the controller starts procs");
  if (count == 0) throw ConfigError("spawn_procs: asked for 0 procs");
  std::lock_guard lock(respawnMutex_);
  std::string refusal = detail::spawnRefusal();
  if (!refusal.empty()) throw Error("cannot start new procs: " + refusal);
  Rank spare = topology_.slots - nextSlot_;
  if (count > spare) {
    throw Error("spawn_procs: " + std::to_string(count) + " procs asked for, but only " +
                std::to_string(spare) +
                " spare rank slots are left (CROWN_SPARE_RANKS sets how many a job has)");
  }
  std::vector<Rank> slots;
  for (std::size_t i = 0; i < count; ++i) slots.push_back(nextSlot_++);  // spent, whatever comes
  return slots;
}

void Runtime::spawnProcs(const std::vector<Rank>& slots, const std::string& program,
                         const std::vector<std::string>& arguments, const std::string& host) {
  if (slots.empty()) throw ConfigError("spawn_procs: no slot to start a proc in");
  std::lock_guard lock(respawnMutex_);
  Rank first = slots.front();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] != first + i || slots[i] >= nextSlot_ || slots[i] < topology_.size ||
        proc_->joined(slots[i])) {
      throw ConfigError("spawn_procs: ranks " + std::to_string(first) + ".. are not free "
                        "consecutive slots of one reserve_procs");
    }
  }
  std::vector<detail::JoinOffer> offers;
  for (Rank slot : slots) {
    offers.push_back(offerFor(slot));
    offers.back().groupFirst = first;
    offers.back().groupSize = static_cast<Rank>(slots.size());
  }
  auto timeout = env::millis("CROWN_RESPAWN_TIMEOUT_MS", 60s);
  auto started = std::chrono::steady_clock::now();
  std::vector<detail::JoinAnswer> answers;
  spawnOnMpiThread("spawn_procs()", [&] {
    answers = detail::spawnProcesses(offers, {program, arguments, host}, timeout);
  });
  std::string failures;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i].error.empty())
      failures += "\n  rank " + std::to_string(slots[i]) + ": " + answers[i].error;
  }
  // None is admitted when one failed: those that joined hear nothing from
  // the controller, and exit at CROWN_CONTROLLER_TIMEOUT_MS.
  if (!failures.empty()) throw BootstrapError("spawn_procs: procs that cannot join:" + failures);
  admitJoined(slots, answers);
  log::get().info("started ranks {}-{} in {} ms", first, slots.back(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - started)
                      .count());
}

// A joining process's bootstrap (a replacement, a spawned proc, an attached
// client), once it listens and has answered the controller: no
// MPI_COMM_WORLD of the job's to adopt (nor RDMA window), and no ping
// round, since the controller admits it only after this.
Runtime& Runtime::joinAsReplacement(const detail::JoinOffer& offer,
                                    std::unique_ptr<transport::Transport> fabric,
                                    const std::string& error) {
  Topology& topo = topology_;
  if (!error.empty()) {
    failBootstrap(*this, "\n  rank " + std::to_string(topo.rank) + " (" +
                             (attached_ ? "an attached client" : "a process joining the job") +
                             ") cannot listen: " + error);
  }
  std::string mine = offer.addresses[topo.rank];
  addresses_ = transport::decodeAddresses(mine);
  auto hosts = std::make_shared<std::vector<std::string>>(offer.hosts.begin(),
                                                          offer.hosts.begin() + topo.size);
  hosts->resize(topo.slots);
  (*hosts)[topo.rank] = offer.hosts[topo.rank];
  if (offer.groupSize > 0) {
    // A spawned proc: its MPI_COMM_WORLD is its group's, crown's ranks
    // groupFirst.. in order. No RDMA window: the controller is outside it.
    mpi_->service->adoptWorld(mpi_->comm, *hosts, offer.groupFirst);
  } else {
    mpi_->service->adoptNoWorld(*hosts);
  }
  // Launched ranks' addresses as they were (lost ones are marked so); the
  // replacements admitted after start, as every other rank admitted them.
  std::vector<std::string> peers(offer.addresses.begin(), offer.addresses.begin() + topo.size);
  peers.resize(topo.slots);
  peers[topo.rank] = mine;
  startProc(std::move(hosts), offer.lost, std::move(fabric), std::move(peers));
  for (Rank joined : offer.joined) {
    proc_->admitRank(joined, offer.hosts[joined], offer.addresses[joined]);
  }
  log::get().debug("joined as rank {} of {} slots on {}, {}", topo.rank, topo.slots,
                   offer.hosts[topo.rank],
                   attached_             ? "an attached client"
                   : offer.groupSize > 0 ? "spawned"
                                         : "replacing a lost rank");
  return *this;
}

bool Runtime::launchedAlone() { return detail::launchedAlone(); }

std::string Runtime::spawnRefusal() { return detail::spawnRefusal(); }

void Runtime::stopSpawned(const std::vector<Rank>& ranks) {
  if (topology_.rank != 0) throw ConfigError("stopping procs: only the controller does");
  Proc& proc = *proc_;
  for (Rank rank : ranks) {
    if (rank < topology_.size || rank >= topology_.slots) {
      throw ConfigError("rank " + std::to_string(rank) +
                        " was started by the launch, not by spawn_procs: it ends with the job");
    }
  }
  auto& lifecycle = detail::Lifecycle::of(proc);
  lifecycle.expectDepartures(ranks, "procs stopping");  // everybody, before any of them goes
  for (Rank rank : ranks) {
    if (proc.alive(rank)) proc.send({rank, lifecycle.agentId()}, detail::Shutdown{0, false});
  }
  auto bound = env::millis("CROWN_SHUTDOWN_TIMEOUT_MS", 30s) + 1s;
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (Rank rank : ranks) {
    while (proc.alive(rank)) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error("rank " + std::to_string(rank) + " was told to stop but its links are still " +
                    "open after " + std::to_string(bound.count()) + " ms");
      }
      std::this_thread::sleep_for(5ms);
    }
  }
}

}  // namespace crown
