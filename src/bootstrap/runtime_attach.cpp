// A client attached to a served job (issue 46; docs/processes.md, "Attaching
// to a served job"). The served job's controller admits it the way it
// admits a spawned proc (runtime_respawn.cpp), in a spare slot, but the
// offer travels over the console's connection (python/crown/_attach*.py)
// instead of MPI: the client proved the job's token there, and the fabric
// secret in the offer is masked with a pad that only holders of the token
// can compute (SEC-1). The client starts no MPI: it is outside the job's
// MPI world, as the controller of spawn_procs is, and its RDMA buffers
// move over the fabric.
#include "bootstrap/lifecycle.h"
#include "bootstrap/respawn.h"
#include "bootstrap/runtime_mpi.h"
#include "crown/bootstrap/runtime.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/supervision/module.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

std::string masked(std::string secret, const std::string& pad) {
  if (pad.size() < secret.size())
    throw ConfigError("attach: the pad is " + std::to_string(pad.size()) + " bytes; the secret " +
                      std::to_string(secret.size()));
  for (std::size_t i = 0; i < secret.size(); ++i) secret[i] ^= pad[i];
  return secret;
}

}  // namespace

std::pair<Rank, std::string> Runtime::offerAttach(const std::string& pad) {
  if (topology_.rank != 0)
    throw ConfigError("attach: only the served job's controller admits clients");
  std::lock_guard lock(respawnMutex_);
  if (nextSlot_ >= topology_.slots) {
    throw Error(
        "attach: no spare rank slot is left for a client (CROWN_SPARE_RANKS sets how "
        "many a job has)");
  }
  Rank slot = nextSlot_++;  // spent, whatever comes: a client may have listened in it
  detail::JoinOffer offer = offerFor(slot);
  offer.secret = masked(offer.secret, pad);
  return {slot, wire::toBytes(offer)};
}

void Runtime::admitAttached(Rank slot, const std::string& host, const std::string& address) {
  std::lock_guard lock(respawnMutex_);
  if (slot < topology_.size || slot >= nextSlot_ || proc_->joined(slot))
    throw ConfigError("attach: rank " + std::to_string(slot) +
                      " is not a slot offered to a client");
  admitJoined({slot}, {detail::JoinAnswer{host, address, ""}});
  log::get().info("a client attached as rank {} (on {})", slot, host);
}

void Runtime::releaseAttached(Rank slot) {
  Proc& proc = *proc_;
  if (!proc.joined(slot)) return;  // it never joined: nobody knows it
  detail::Lifecycle::of(proc).expectDepartures({slot}, "a client detaching");
  // Gone now, for every rank (RankLost), whether or not a link to it was
  // ever opened (links open on first use): the next client's offer does
  // not list it among the live ranks.
  proc.declareLost(slot, "the client detached");
}

std::pair<std::string, std::string> Runtime::attach(const std::string& offer,
                                                    const std::string& pad) {
  auto decoded = wire::fromBytes<detail::JoinOffer>(offer);
  decoded.secret = masked(decoded.secret, pad);
  detail::JoinAnswer answer;
  Runtime& runtime = start(nullptr, nullptr, &decoded, &answer);
  supervision::ownMeshesHere(runtime.proc());  // its main thread spawns as a controller's does
  return {answer.host, answer.address};
}

// As finish() without the job's part (no barrier with the job's ranks, no
// exit bound: the client's process goes on, a notebook's kernel say) and
// without MPI, which a client never started.
void Runtime::leave() {
  if (finishing_.exchange(true)) return;
  if (proc_) {
    detail::Lifecycle::of(*proc_).requestShutdown(0);  // links closing are expected now
    proc_->stop(env::millis("CROWN_FLUSH_TIMEOUT_MS", 5s));
  }
  mpi_->service->finalize([] {});  // fails what is pending; it has no communicator
}

}  // namespace crown
