// The MPI service thread (THR-1): the one thread that calls MPI, from
// MPI_Init_thread to MPI_Finalize, and bootstrap's implementation of
// crown::MpiService. Its parts:
//   mpi_service.cpp  the thread, its queues and the progress loop (MPI_Testsome,
//                    back-off, abandonment of a lost peer's operations)
//   mpi_ops.cpp      the typed operations and the communicators (commAlong)
//   mpi_window.cpp   the world's dynamic RMA window, attach/detach, chunked Rget/Rput
// Queues and the pending table are shared under mutex_; everything else
// (the active operations, the MPI_Comm handles) belongs to the service thread.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "crown/actor/mpi_service.h"

namespace crown::detail {

class MpiService final : public crown::MpiService {
 public:
  MpiService();
  ~MpiService() override;

  /// After bootstrap, on the service thread: `world` becomes Comm::world()
  /// (the service does not own it) and `hosts` name the ranks in ProcessLost.
  /// `first`: crown's rank of the world's rank 0 (a spawned group's first;
  /// 0 for the launch's world).
  void adoptWorld(MPI_Comm world, std::vector<std::string> hosts, Rank first = 0);
  /// In a replacement for a lost rank (respawn.h), instead of adoptWorld:
  /// it is outside the job's MPI_COMM_WORLD, so there is no world, and an
  /// operation says so; `hosts` name the ranks in ProcessLost.
  void adoptNoWorld(std::vector<std::string> hosts);
  /// Fails what is still pending, frees the communicators made by commOver,
  /// then runs `step` (MPI_Finalize) on the service thread; later operations
  /// fail at once. Rethrows what `step` throws.
  void finalize(std::function<void()> step);
  /// At bootstrap, after adoptWorld, on every rank (collective): makes the
  /// world's dynamic window under MPI_Win_lock_all, unless `wanted` is false
  /// (CROWN_RDMA_WINDOW=0). Every rank ends with a window, or none does.
  void openWindow(bool wanted);
  /// On the service thread, when MPI cannot be called here any more (a
  /// respawn's MPI_Comm_spawn left behind on a helper thread, still inside
  /// MPI: respawn.h): every pending operation fails with `why`, and so does
  /// every later one, call() and finalize() included, at once; the service
  /// thread never calls MPI again. For the rest of the process's life.
  void markUnusable(const std::string& why);
  /// Why MPI cannot be called here any more ("" while it can).
  std::string unusable() const;

  void call(std::function<void()> fn) override;
  Future<void> submit(std::string what, Start start, std::vector<Rank> peers) override;
  Future<void> send(Comm comm, Rank peer, int tag, const void* data, std::size_t bytes) override;
  Future<std::size_t> recv(Comm comm, Rank peer, int tag, void* data, std::size_t bytes) override;
  Future<void> broadcast(Comm comm, void* data, std::size_t bytes, Rank root) override;
  Future<void> allreduce(Comm comm, void* data, std::size_t count, DType type,
                         ReduceOp op) override;
  Future<void> barrier(Comm comm) override;
  Future<void> allgather(Comm comm, const void* send, void* recv, std::size_t bytesEach) override;
  Future<void> reduceScatter(Comm comm, const void* send, void* recv, std::size_t countEach,
                             DType type, ReduceOp op) override;
  Future<void> alltoall(Comm comm, const void* send, void* recv, std::size_t bytesEach) override;
  Comm commOver(const std::vector<std::size_t>& sizes, const std::vector<std::size_t>& dims,
                std::uint32_t instance = 0) override;
  Comm commOfRanks(const std::vector<Rank>& members, std::uint32_t instance = 0) override;
  std::optional<Rank> worldPosition(Rank rank) const override;
  Rank commRank(Comm comm) const override;
  std::vector<Rank> commMembers(Comm comm) const override;
  const void* nativeComm(Comm comm) const override;
  void abandonPeer(Rank peer, std::string reason) override;
  bool hasWindow() const override { return hasWindow_; }
  std::uint64_t windowAttach(void* base, std::size_t bytes) override;
  void windowDetach(void* base) override;
  std::size_t windowAttached() const override { return attached_; }
  bool cudaAware() const override { return cudaAware_; }
  const void* nativeWindow() const override { return hasWindow_ ? &window_ : nullptr; }
  Future<void> windowGet(Rank owner, std::uint64_t address, void* dst, std::size_t bytes,
                         std::shared_ptr<const std::atomic<bool>> stop) override;
  Future<void> windowPut(Rank owner, std::uint64_t address, const void* src, std::size_t bytes,
                         std::shared_ptr<const std::atomic<bool>> stop) override;
  std::thread::id threadId() const override { return threadId_; }
  Stats stats() const override;

 private:
  using Clock = std::chrono::steady_clock;
  enum class Kind { pointToPoint, collective, generic };

  // One asynchronous operation, owned by the service thread once started.
  struct Op {
    std::uint64_t id = 0;
    Kind kind = Kind::generic;
    std::string what;
    std::vector<Rank> peers;                         // world ranks whose loss fails it
    std::function<void(MPI_Request&)> post;          // typed: posts the MPI call
    std::function<void(const MPI_Status&)> succeed;  // completes the future
    Start start;                                     // generic
    Poll poll;                                       // generic, once started
    std::optional<Clock::time_point> cancelledAt;    // p2p abandoned: MPI_Cancel posted
  };
  // What any thread needs to fail an operation (abandonPeer, finalize).
  struct Pending {
    std::vector<Rank> peers;
    std::function<void(std::exception_ptr)> fail;
  };
  struct CommInfo {
    MPI_Comm comm = MPI_COMM_NULL;
    Rank rank = 0;
    std::vector<Rank> members;  // world ranks, by rank in the communicator
  };

  // Registers a typed operation on `comm` (with `peer`, a rank in it, for
  // point-to-point) and queues it for the service thread, where `post`
  // posts it and `value` reads its result; the future fails at once when a
  // peer is lost or MPI is gone.
  template <class T>
  Future<T> enqueue(std::string what, Kind kind, Comm comm, std::optional<Rank> peer,
                    std::function<void(MPI_Comm, MPI_Request&)> post,
                    std::function<T(const MPI_Status&)> value);
  // Common tail of enqueue and submit: the pending entry and the queue.
  void admit(std::unique_ptr<Op> op, std::function<void(std::exception_ptr)> fail);
  std::exception_ptr lostError(Rank peer, const std::string& reason) const;  // under mutex_
  const CommInfo& info(Comm comm) const;  // under mutex_; throws ConfigError for an unknown one

  void loop();
  void startOp(std::unique_ptr<Op> op);
  bool progress();  // one pass over the active operations; true when something moved
  void applyAbandon(Rank peer);
  void complete(std::uint64_t id, const std::function<void()>& fill);
  void fail(std::uint64_t id, std::exception_ptr error);
  void failEverything(const std::string& why);
  // windowGet and windowPut: one generic operation of chunked MPI_Rget/MPI_Rput.
  Future<void> transfer(std::string what, Rank owner, std::uint64_t address, char* local,
                        std::size_t bytes, bool put, std::shared_ptr<const std::atomic<bool>> stop);
  void closeWindow();  // in finalize, on the service thread

  std::thread::id threadId_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Shared, under mutex_.
  std::deque<std::packaged_task<void()>> tasks_;
  std::deque<std::unique_ptr<Op>> incoming_;
  std::deque<Rank> abandons_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::map<Rank, std::string> lost_;  // abandoned peers and why
  std::deque<CommInfo> comms_;        // by Comm id; [0] is the world once adopted (a deque:
                                      // nativeComm's pointers stay valid as it grows)
  std::map<std::tuple<std::vector<std::size_t>, std::vector<std::size_t>, std::uint32_t>, Comm>
      along_;
  std::map<std::pair<std::vector<Rank>, std::uint32_t>, Comm> groups_;  // commOfRanks
  std::vector<std::string> hosts_;
  std::uint64_t nextId_ = 1;
  bool finalized_ = false;
  bool outsideWorld_ = false;  // adoptNoWorld
  bool stopping_ = false;
  std::string unusable_;       // markUnusable's reason; "" while MPI is usable
  std::atomic<bool> broken_{false};  // !unusable_.empty(), for the service thread's loop
  std::atomic<std::uint64_t> splits_{0}, completed_{0}, failed_{0};
  std::atomic<std::size_t> draining_{0};
  std::atomic<bool> hasWindow_{false};
  std::atomic<bool> cudaAware_{false};
  std::atomic<std::size_t> attached_{0};         // regions attached to window_
  std::atomic<std::size_t> transfersActive_{0};  // windowGet/windowPut started, not yet dropped
  Clock::time_point lastTransferEnd_{};          // the service thread's: when the last one ended
  Clock::time_point lastMoved_{};    // the service thread's: when an operation last moved
  bool collectivesInFlight() const;  // the service thread's: typed_ holds a collective
  // The service thread's own.
  MPI_Win window_ = MPI_WIN_NULL;
  MPI_Comm windowComm_ = MPI_COMM_NULL;  // the world's, for the progress probe
  std::vector<int> pids_;                // every rank's pid (set once, in openWindow)
  std::set<void*> attachedBases_;
  std::vector<std::unique_ptr<Op>> typed_;  // typed_[i] waits on requests_[i]
  std::vector<MPI_Request> requests_;
  std::vector<std::unique_ptr<Op>> generic_;
  std::thread thread_;  // last: starts after every member above is built
};

}  // namespace crown::detail
