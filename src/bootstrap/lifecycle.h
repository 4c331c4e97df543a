// Lifecycle: bootstrap's module on the Proc of every rank, which keeps the
// job's shutdown (SHT-1). Its shutdown agent takes the controller's
// Shutdown; a worker whose controller is lost shuts itself down with 1; and
// it remembers whether a rank was lost before shutdown began, for
// Runtime::finish's "skip MPI_Finalize after a loss" rule. A rank lost
// before shutdown is also abandoned by the MPI service, so that MPI
// operations waiting on it fail instead of hanging (DLV-1).
//
// SHT-1 also covers a worker that the controller took for lost while it
// lives on (stopped past the heartbeat bound, its link closed over a bad
// frame): no Shutdown comes to it, and with no open link it would never hear
// the controller go. So every worker pings the controller once a second from
// a watchdog thread, and one that hears no answer for
// CROWN_CONTROLLER_TIMEOUT_MS shuts itself down with 1.
//
// The controller passes every loss it sees on to the other ranks
// (RankLost), so that each fails what waits on the lost rank, MPI
// operations included, even without a link of its own to it; and every
// replacement that joins (RankJoined), which each rank admits; and that MPI
// on the controller became unusable (MpiUnusable, issue 43), so that no rank
// waits for it in MPI. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "crown/actor/module.h"
#include "crown/actor/mpi_service.h"

namespace crown::detail {

/// The controller is done: the process leaves its serve loop and exits with
/// `code`. `ranksLost`: some rank died, so MPI_Finalize (which waits for every
/// rank) must be skipped.
struct Shutdown {
  int code = 0;
  bool ranksLost = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& code& ranksLost;
  }
};

/// The controller's word to every other rank that `rank` is lost
/// (Proc::declareLost): a rank with no link to it would not notice.
struct RankLost {
  Rank rank = 0;
  std::string reason;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& reason;
  }
};

/// The controller's word to every other rank that a replacement for a lost
/// rank joined in slot `rank` (Runtime::respawn): each admits it
/// (Proc::admitRank) before the controller sends it work through them.
struct RankJoined {
  Rank rank = 0;
  std::string host;
  std::string address;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& host& address;
  }
};

/// The controller's word to every other rank that `ranks` are leaving by
/// design (their procs were stopped: Runtime::stopSpawned): each expects
/// their departure (Proc::expectDeparture), so that their links closing are
/// no failure to report.
struct RanksDeparting {
  std::vector<Rank> ranks;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ranks;
  }
};

/// The controller's word to every other rank that MPI on the controller is
/// unusable for the rest of the job (a respawn left a helper thread inside
/// MPI_Comm_spawn: respawn.h): each fails its MPI operations with the
/// controller at once, and none waits for it in MPI at shutdown.
struct MpiUnusable {
  std::string reason;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& reason;
  }
};

/// Waits for the acknowledgements of a controller's word to the ranks,
/// until `bound` from now in all: a rank lost meanwhile needs none, and any
/// other failure is logged as `whom` not acknowledging.
void awaitAcks(std::vector<Future<void>>& acks, std::chrono::milliseconds bound,
               const std::string& whom);

class Lifecycle : public Proc::Module {
 public:
  /// `mpi`: the service whose operations with a lost rank fail (null: none).
  static Proc::ModuleFactory factory(std::shared_ptr<MpiService> mpi);
  /// `controllerTimeout`: a worker that hears nothing from the controller
  /// for this long exits (0: never).
  Lifecycle(std::shared_ptr<MpiService> mpi, std::chrono::milliseconds controllerTimeout)
      : mpi_(std::move(mpi)), controllerTimeout_(controllerTimeout) {}
  ~Lifecycle() override;
  /// The lifecycle module of `proc`; throws crown::Error when it has none.
  static Lifecycle& of(Proc& proc);

  void install(Proc& proc, SystemIds& ids) override;
  void stop() override;
  void peerLost(Rank peer, const std::string& reason) override;

  /// The shutdown agent's id: the same on every rank.
  std::uint64_t agentId() const { return agent_; }
  /// On the controller: sends `message` to the shutdown agent of every live
  /// rank but itself and those `skip(rank)` names, and adds the futures of
  /// their acknowledgements to `acks` (for awaitAcks).
  template <class Msg, class Skip>
  void askLiveRanks(const Msg& message, Skip skip, std::vector<Future<void>>& acks) {
    for (Rank r = 1; r < proc_->size(); ++r) {
      if (!skip(r) && proc_->alive(r)) acks.push_back(proc_->request<void>({r, agent_}, message));
    }
  }
  /// Marks this process as shutting down with `code` (the first call wins)
  /// and wakes waitForShutdown(). Links lost after this are expected.
  /// `ranksLost`: the controller saw a rank die that this process may not have.
  void requestShutdown(int code, bool ranksLost = false);
  /// True when a rank was lost before shutdown began, here or (as the
  /// controller said) elsewhere, or when MPI on the controller became
  /// unusable (mpiUnusable): either way MPI cannot synchronise every rank.
  bool ranksLost() const { return unexpectedLoss_; }
  /// MPI on the controller is unusable from now on (`why`, MpiUnusable). On
  /// the controller (whose service is marked already) it tells every live
  /// rank and waits, bounded, for their acknowledgements; on another rank it
  /// fails every MPI operation with the controller (abandonPeer). Either
  /// way shutdown skips MPI's barrier and MPI_Finalize (ranksLost).
  void mpiUnusable(const std::string& why);
  /// On the controller: every live rank, and this one, expects `ranks` to
  /// leave (RanksDeparting), so their links closing is no failure; waits,
  /// bounded, for the acknowledgements (`whom` names the leavers in a
  /// warning). Stopped procs and detaching clients go this way.
  void expectDepartures(const std::vector<Rank>& ranks, const std::string& whom);
  /// True once requestShutdown (or stop) has run: an exit is expected now.
  bool shuttingDown();
  /// A worker that begins to serve (after bootstrap: the controller is up)
  /// starts its watchdog of the controller.
  void startWatchdog();
  /// Blocks until requestShutdown; returns its code.
  int waitForShutdown();

 private:
  void watchController();  // the watchdog thread's loop

  std::shared_ptr<MpiService> mpi_;
  std::chrono::milliseconds controllerTimeout_;
  std::thread watchdog_;
  Proc* proc_ = nullptr;
  std::uint64_t agent_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<int> code_;
  std::atomic<bool> unexpectedLoss_{false};
};

}  // namespace crown::detail

CROWN_MESSAGE(crown::detail::Shutdown, "crown::Shutdown");
CROWN_MESSAGE(crown::detail::RankLost, "crown::RankLost");
CROWN_MESSAGE(crown::detail::RankJoined, "crown::RankJoined");
CROWN_MESSAGE(crown::detail::MpiUnusable, "crown::MpiUnusable");
CROWN_MESSAGE(crown::detail::RanksDeparting, "crown::RanksDeparting");
