#include "bootstrap/lifecycle.h"

#include <algorithm>

#include "crown/actor/actor.h"
#include "crown/actor/agent.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown::detail {
namespace {

class ShutdownAgent : public Actor {
 public:
  ShutdownAgent(Lifecycle& lifecycle, Proc& proc) {
    handle<Shutdown>([&lifecycle](const Shutdown& shutdown) {
      lifecycle.requestShutdown(shutdown.code, shutdown.ranksLost);
    });
    handle<RankLost>([&proc](const RankLost& lost) {
      if (lost.rank != proc.rank()) proc.declareLost(lost.rank, "the controller lost it: " + lost.reason);
    });
    handle<RankJoined>([&proc](const RankJoined& joined) {
      proc.admitRank(joined.rank, joined.host, joined.address);
    });
    handle<RanksDeparting>([&proc](const RanksDeparting& departing) {
      for (Rank rank : departing.ranks) proc.expectDeparture(rank);
    });
    handle<MpiUnusable>([&lifecycle](const MpiUnusable& unusable) {
      lifecycle.mpiUnusable(unusable.reason);
    });
  }
};

}  // namespace

void awaitAcks(std::vector<Future<void>>& acks, std::chrono::milliseconds bound,
               const std::string& whom) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (auto& ack : acks) {
    try {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      ack.get(std::max(left, std::chrono::milliseconds(1)));
    } catch (const ProcessLost&) {
      // gone already: nothing to tell it
    } catch (const std::exception& e) {
      log::get().warn("a worker did not acknowledge {}: {}", whom, e.what());
    }
  }
}

Proc::ModuleFactory Lifecycle::factory(std::shared_ptr<MpiService> mpi) {
  auto timeout = env::millis("CROWN_CONTROLLER_TIMEOUT_MS", std::chrono::milliseconds(30000),
                             std::chrono::milliseconds(0));
  return [mpi, timeout] { return std::make_unique<Lifecycle>(mpi, timeout); };
}

Lifecycle::~Lifecycle() { stop(); }

Lifecycle& Lifecycle::of(Proc& proc) {
  auto* module = proc.findModule<Lifecycle>();
  CROWN_CHECK(module != nullptr, "this proc has no lifecycle module (Runtime::init installs it)");
  return *module;
}

void Lifecycle::install(Proc& proc, SystemIds& ids) {
  proc_ = &proc;
  agent_ = ids.claim();
  proc.spawnLocalAt(agent_, std::make_unique<ShutdownAgent>(*this, proc), "shutdown-agent");
}

void Lifecycle::startWatchdog() {
  if (proc_->rank() != 0 && controllerTimeout_.count() > 0 && !watchdog_.joinable()) {
    watchdog_ = std::thread([this] { watchController(); });
  }
}

void Lifecycle::stop() {
  {
    std::lock_guard lock(mutex_);
    if (!code_) code_ = 0;
  }
  cv_.notify_all();
  if (watchdog_.joinable() && watchdog_.get_id() != std::this_thread::get_id()) watchdog_.join();
}

// One ping in flight at a time; a ping that fails at once (a link closed
// over a bad frame) is sent again a second later, and only a controller
// silent for the whole bound ends this rank. A lost controller ends it
// sooner, through peerLost.
void Lifecycle::watchController() {
  using Clock = std::chrono::steady_clock;
  auto heard = Clock::now();
  Future<Rank> ping;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (cv_.wait_for(lock, std::chrono::seconds(1), [this] { return code_.has_value(); })) return;
    }
    if (ping.valid() && ping.isReady()) {
      try {
        ping.get();
        heard = Clock::now();
      } catch (const std::exception&) {
      }
      ping = {};
    }
    auto silence = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - heard);
    if (silence > controllerTimeout_) {
      log::get().error("the controller (rank 0) has not answered this rank for {} ms "
                       "(CROWN_CONTROLLER_TIMEOUT_MS): it is gone or has given this rank up; "
                       "exiting (SHT-1)",
                       silence.count());
      requestShutdown(1, /*ranksLost=*/true);  // no barrier: the controller will not come
      return;
    }
    if (!ping.valid()) ping = proc_->request<Rank>({0, kAgentLocalId}, agent::Ping{});
  }
}

void Lifecycle::peerLost(Rank peer, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (code_) return;  // shutting down: links closing are expected
  }
  bool expected = proc_->departing(peer);  // its procs were stopped
  if (expected) {
    log::get().debug("rank {} left: {}", peer, reason);
  } else {
    unexpectedLoss_ = true;
    log::get().warn("lost rank {}: {}", peer, reason);
  }
  // Only before shutdown (the return above): a neighbour that closes its
  // links after the shutdown barrier is not lost, and MPI_Finalize needs it.
  if (mpi_) mpi_->abandonPeer(peer, reason);
  if (proc_->rank() == 0) {
    for (Rank other = 1; other < proc_->size(); ++other) {
      if (other != peer && proc_->alive(other)) proc_->send({other, agent_}, RankLost{peer, reason});
    }
  }
  // A worker whose controller is gone has nobody left to serve.
  if (peer == 0 && proc_->rank() != 0) requestShutdown(1);
}

void Lifecycle::mpiUnusable(const std::string& why) {
  unexpectedLoss_ = true;  // shutdown: no MPI barrier, no MPI_Finalize (they wait for rank 0)
  if (proc_->rank() != 0) {
    log::get().warn("MPI on the controller is unusable: {}", why);
    if (mpi_) mpi_->abandonPeer(0, "MPI on the controller is unusable: " + why);
    return;
  }
  std::vector<Future<void>> acks;
  askLiveRanks(MpiUnusable{why}, [](Rank) { return false; }, acks);
  awaitAcks(acks, env::millis("CROWN_CONNECT_TIMEOUT_MS", std::chrono::milliseconds(10000)),
            "that MPI on the controller is unusable");
}

void Lifecycle::expectDepartures(const std::vector<Rank>& ranks, const std::string& whom) {
  std::vector<Future<void>> acks;
  askLiveRanks(
      RanksDeparting{ranks},
      [&](Rank r) { return std::find(ranks.begin(), ranks.end(), r) != ranks.end(); }, acks);
  for (Rank rank : ranks) proc_->expectDeparture(rank);
  awaitAcks(acks, env::millis("CROWN_CONNECT_TIMEOUT_MS", std::chrono::milliseconds(10000)), whom);
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

bool Lifecycle::shuttingDown() {
  std::lock_guard lock(mutex_);
  return code_.has_value();
}

int Lifecycle::waitForShutdown() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return code_.has_value(); });
  return *code_;
}

}  // namespace crown::detail
