#include "bootstrap/lifecycle.h"

#include "crown/actor/actor.h"
#include "crown/common/log.h"

namespace crown::detail {
namespace {

class ShutdownAgent : public Actor {
 public:
  explicit ShutdownAgent(Lifecycle& lifecycle) {
    handle<Shutdown>([&lifecycle](const Shutdown& shutdown) {
      lifecycle.requestShutdown(shutdown.code, shutdown.ranksLost);
    });
  }
};

}  // namespace

Proc::ModuleFactory Lifecycle::factory(std::shared_ptr<MpiService> mpi) {
  return [mpi] { return std::make_unique<Lifecycle>(mpi); };
}

Lifecycle& Lifecycle::of(Proc& proc) {
  auto* module = proc.findModule<Lifecycle>();
  CROWN_CHECK(module != nullptr, "this proc has no lifecycle module (Runtime::init installs it)");
  return *module;
}

void Lifecycle::install(Proc& proc, SystemIds& ids) {
  proc_ = &proc;
  agent_ = ids.claim();
  proc.spawnLocalAt(agent_, std::make_unique<ShutdownAgent>(*this), "shutdown-agent");
}

void Lifecycle::stop() {
  std::lock_guard lock(mutex_);
  if (!code_) code_ = 0;
}

void Lifecycle::peerLost(Rank peer, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (code_) return;  // shutting down: links closing are expected
  }
  unexpectedLoss_ = true;
  log::get().warn("lost rank {}: {}", peer, reason);
  // Only before shutdown (the return above): a neighbour that closes its
  // links after the shutdown barrier is not lost, and MPI_Finalize needs it.
  if (mpi_) mpi_->abandonPeer(peer, reason);
  // A worker whose controller is gone has nobody left to serve.
  if (peer == 0 && proc_->rank() != 0) requestShutdown(1);
}

void Lifecycle::requestShutdown(int code, bool ranksLost) {
  {
    std::lock_guard lock(mutex_);
    if (code_) return;
    code_ = code;
    if (ranksLost) unexpectedLoss_ = true;
  }
  cv_.notify_all();
}

int Lifecycle::waitForShutdown() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return code_.has_value(); });
  return *code_;
}

}  // namespace crown::detail
