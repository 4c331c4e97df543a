// MpiService: how the layers above the actor kernel (tensor collectives,
// RDMA windows, ...) reach MPI without seeing bootstrap's internals or
// mpi.h. Bootstrap implements it with the MPI service thread (THR-1: after
// bootstrap only that thread calls MPI); Proc::mpi() hands it out.
//
// Two ways in: call() runs a closure on the service thread and waits; the
// asynchronous operations (send, recv, broadcast, allreduce, barrier, and
// submit() for any other MPI call) post nonblocking MPI calls there and
// return a Future that the service's progress loop completes when MPI_Test*
// says done. The loop sleeps on a condition variable while nothing is in
// flight, and never blocks in MPI_Wait, so one operation stuck on a blocked
// or lost peer never freezes the others (abandonPeer fails it, DLV-1).
//
// Thread-safe: any thread may call any method (except nativeComm, which is
// for the service thread). Futures complete on the service thread: keep
// their continuations short, and never wait on MPI work in them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "crown/actor/future.h"
#include "crown/common/error.h"

namespace crown {

/// Element types of the typed collectives (no half types: MPI has none).
enum class DType : std::uint8_t { i8, u8, i32, u32, i64, u64, f32, f64 };
/// Reductions of allreduce.
enum class ReduceOp : std::uint8_t { sum, prod, min, max };

/// Bytes per element of `type`.
constexpr std::size_t dtypeSize(DType type) {
  switch (type) {
    case DType::i8:
    case DType::u8:
      return 1;
    case DType::i32:
    case DType::u32:
    case DType::f32:
      return 4;
    case DType::i64:
    case DType::u64:
    case DType::f64:
      return 8;
  }
  return 0;
}

/// A communicator of the MPI service: an opaque handle that the service maps
/// to an MPI_Comm. Comm::world() is every rank of the launch (crown's own
/// duplicate of MPI_COMM_WORLD); commAlong() makes the others. Ids are given
/// out in creation order, so ranks that create the same communicators in the
/// same order (as they must: creation is collective) hold the same ids.
class Comm {
 public:
  constexpr Comm() = default;
  constexpr explicit Comm(std::uint32_t id) : id_(id) {}
  static constexpr Comm world() { return Comm(0); }
  constexpr std::uint32_t id() const { return id_; }
  friend constexpr bool operator==(Comm, Comm) = default;

 private:
  std::uint32_t id_ = 0;
};

class MpiService {
 public:
  /// Called by the progress loop until it returns true (done). Throwing fails the operation.
  using Poll = std::function<bool()>;
  /// Runs once on the service thread: posts nonblocking MPI calls and returns their Poll.
  using Start = std::function<Poll()>;

  struct Stats {
    std::uint64_t splits = 0;     ///< MPI_Comm_split calls made by commOver
    std::uint64_t completed = 0;  ///< operations whose future got its value
    std::uint64_t failed = 0;     ///< operations failed by the service (not bad arguments)
    std::size_t pending = 0;      ///< operations submitted and not yet finished by the service
    std::size_t draining = 0;     ///< abandoned requests still polled until MPI lets go of them
  };

  virtual ~MpiService() = default;

  /// Runs `fn` on the MPI service thread and waits; rethrows what it throws.
  /// Served while asynchronous operations are in flight. From the service
  /// thread itself (a future's continuation) it runs `fn` at once. `fn` that
  /// blocks in MPI (a blocking collective) holds up every operation until it
  /// returns: prefer the asynchronous operations.
  virtual void call(std::function<void()> fn) = 0;

  /// The generic asynchronous operation, for MPI calls the typed ones do not
  /// cover: `start` runs on the service thread, posts its MPI calls and
  /// returns the Poll that the loop then calls (each pass, on the service
  /// thread) until it returns true. `what` names it in errors. `peers`: the
  /// world ranks whose loss (abandonPeer) fails it; then its Poll is dropped
  /// without another call, and what it posted is left to MPI.
  virtual Future<void> submit(std::string what, Start start, std::vector<Rank> peers) = 0;

  // The typed operations. Ranks (peer, root) are ranks in `comm`; buffers stay
  // the caller's and must stay valid until the future completes (and, for an
  // abandoned collective, past that: see abandonPeer). Sizes up to INT_MAX
  // bytes (elements for allreduce); larger ones fail with ConfigError. MPI
  // errors (a truncated receive, say) fail the future with BootstrapError.
  //
  // Operations are posted on the service thread in the order they were
  // submitted (one queue), so collectives on one communicator match across
  // ranks when each rank submits them in the same order, as MPI requires;
  // submitting them from several threads of one rank leaves that order to
  // chance. A Future::get(timeout) that gives up does not cancel the MPI
  // operation: it goes on, using its buffer, until MPI completes it.

  /// MPI_Isend of `bytes` bytes to `peer` with `tag` (0..32767).
  virtual Future<void> send(Comm comm, Rank peer, int tag, const void* data, std::size_t bytes) = 0;
  /// MPI_Irecv of at most `bytes` bytes from `peer` with `tag`; the future
  /// holds the number of bytes received. A longer message fails it.
  virtual Future<std::size_t> recv(Comm comm, Rank peer, int tag, void* data,
                                   std::size_t bytes) = 0;
  /// MPI_Ibcast of `bytes` bytes from `root` to every rank of `comm`.
  virtual Future<void> broadcast(Comm comm, void* data, std::size_t bytes, Rank root) = 0;
  /// MPI_Iallreduce in place of `count` elements of `type`.
  virtual Future<void> allreduce(Comm comm, void* data, std::size_t count, DType type,
                                 ReduceOp op) = 0;
  /// MPI_Ibarrier over `comm`.
  virtual Future<void> barrier(Comm comm) = 0;
  /// MPI_Iallgather: `bytesEach` bytes from every member's `send`, by rank
  /// in `comm`, into `recv` (members x bytesEach bytes).
  virtual Future<void> allgather(Comm comm, const void* send, void* recv,
                                 std::size_t bytesEach) = 0;
  /// MPI_Ireduce_scatter_block: `send` holds one block of `countEach`
  /// elements per member; member r gets block r reduced over every member in
  /// `recv` (countEach elements).
  virtual Future<void> reduceScatter(Comm comm, const void* send, void* recv,
                                     std::size_t countEach, DType type, ReduceOp op) = 0;
  /// MPI_Ialltoall: block r of `send` (bytesEach bytes) goes to member r;
  /// block s of `recv` comes from member s.
  virtual Future<void> alltoall(Comm comm, const void* send, void* recv,
                                std::size_t bytesEach) = 0;

  /// The communicator along dimension `dim` of a row-major mesh of `sizes`
  /// over the world ranks (their product must be the world size): the ranks
  /// whose coordinates differ from this rank's in `dim` only, ordered by
  /// their coordinate in `dim`. Made with MPI_Comm_split on the first
  /// request and cached: the same (sizes, dim) returns the same Comm without
  /// another split. MPI_Comm_split is collective and blocking: every rank
  /// must make its first request for each (sizes, dim) in the same order,
  /// and the service thread waits in it until they all have, so make the
  /// communicators at setup (when a mesh is made), not while a peer may be lost.
  virtual Comm commAlong(const std::vector<std::size_t>& sizes, std::size_t dim) {
    return commOver(sizes, {dim});
  }
  /// The communicator over several dimensions `dims` (increasing) of the
  /// same mesh: the ranks whose coordinates differ from this rank's in
  /// `dims` only, ordered row-major by their coordinates in `dims`. The
  /// same rules as commAlong: made once per (sizes, dims, instance),
  /// collectively. Instances are separate communicators of the same ranks:
  /// collectives posted from different threads (a tensor engine's streams)
  /// go on different instances, since MPI matches a communicator's
  /// collectives by their order alone.
  virtual Comm commOver(const std::vector<std::size_t>& sizes,
                        const std::vector<std::size_t>& dims, std::uint32_t instance = 0) = 0;
  /// The communicator of exactly `members` (world ranks, in this order, this
  /// rank among them), made with MPI_Comm_create_group: collective over the
  /// members only, so a group that leaves a lost rank out is made (and runs
  /// collectives) while the rest of the world is not there. Made once per
  /// (members, instance) and cached; blocks until every member asks for it
  /// too, so members must ask for their groups in the same order (and no
  /// member of the group may be lost). Throws ConfigError when this rank is
  /// not a member or a rank is out of range or repeated.
  virtual Comm commOfRanks(const std::vector<Rank>& members, std::uint32_t instance = 0) = 0;
  /// Where crown's rank `rank` is in Comm::world(), as send and recv on it
  /// take their peer: a launch's world holds each launched rank as itself,
  /// a spawned group's (spawn_procs: respawn.h) its ranks in order from its
  /// first. nullopt when `rank` is outside this rank's world (another group,
  /// a controller that spawned it, a replacement): no MPI operation reaches it.
  virtual std::optional<Rank> worldPosition(Rank rank) const { return rank; }
  /// This rank's rank in `comm`.
  virtual Rank commRank(Comm comm) const = 0;
  /// The world ranks of `comm`'s members, by their rank in `comm`.
  virtual std::vector<Rank> commMembers(Comm comm) const = 0;
  /// The MPI_Comm behind `comm`, as a pointer to it: cast it to const
  /// MPI_Comm* in a source file that includes mpi.h, and use it on the service
  /// thread only (in submit's Start and Poll). Valid until MPI is finalised.
  virtual const void* nativeComm(Comm comm) const = 0;

  // One-sided memory (RMA) for the rdma layer: the world's dynamic window
  // (MPI_Win_create_dynamic over Comm::world(), made collectively at
  // bootstrap, under one passive-target MPI_Win_lock_all for its whole life).
  // Memory is attached and detached locally, on the service thread; a peer
  // reads and writes it with MPI_Rget/MPI_Rput posted on its own service
  // thread. While anything is attached, the service thread keeps calling MPI
  // (MPI_Iprobe) even when it has nothing else in flight: one-sided MPI over
  // TCP (osc pt2pt) progresses at the target only inside MPI calls.

  /// True when the world has a window (false: CROWN_RDMA_WINDOW=0, or MPI
  /// could not make one on some rank; the rdma layer then uses its fallback).
  virtual bool hasWindow() const { return false; }
  /// MPI_Win_attach of [base, base + bytes); returns the address a peer
  /// names it by (MPI_Get_address). Throws BootstrapError when MPI refuses.
  virtual std::uint64_t windowAttach(void* /*base*/, std::size_t /*bytes*/) {
    throw Error("this MPI service has no window");
  }
  /// MPI_Win_detach of memory attached at `base`. Only after every transfer
  /// that may touch it has ended (the rdma layer's leases keep that).
  virtual void windowDetach(void* /*base*/) {}
  /// True when this MPI says it can move GPU memory itself (CUDA-aware MPI,
  /// asked at bootstrap with Open MPI's MPIX_Query_cuda_support).
  virtual bool cudaAware() const { return false; }
  /// Regions attached now (for tests: none is left behind).
  virtual std::size_t windowAttached() const { return 0; }
  /// The MPI_Win behind the window, as a pointer to it (like nativeComm: cast
  /// to const MPI_Win*, use on the service thread only); null when there is none.
  /// For benchmarks that measure raw MPI on the same window.
  virtual const void* nativeWindow() const { return nullptr; }
  /// MPI_Rget of `bytes` bytes at `address` of world rank `owner` into `dst`,
  /// in chunks of at most CROWN_RDMA_CHUNK_BYTES, a few in flight at a time
  /// (so other operations interleave with a large one). Once `*stop` is set,
  /// no further chunk is posted and the future completes when those in flight
  /// have (its outcome is then not to be trusted). Fails with ProcessLost when
  /// `owner` is lost, with BootstrapError on an MPI error.
  virtual Future<void> windowGet(Rank owner, std::uint64_t /*address*/, void* /*dst*/,
                                 std::size_t /*bytes*/,
                                 std::shared_ptr<const std::atomic<bool>> /*stop*/) {
    return Future<void>::failed(std::make_exception_ptr(
        Error("MPI_Rget from rank " + std::to_string(owner) + ": this MPI service has no window")));
  }
  /// MPI_Rput of `bytes` bytes from `src` to `address` of `owner`, chunked
  /// like windowGet; complete once MPI says the data is at the target
  /// (MPI_Win_flush after the last chunk).
  virtual Future<void> windowPut(Rank owner, std::uint64_t /*address*/, const void* /*src*/,
                                 std::size_t /*bytes*/,
                                 std::shared_ptr<const std::atomic<bool>> /*stop*/) {
    return Future<void>::failed(std::make_exception_ptr(
        Error("MPI_Rput to rank " + std::to_string(owner) + ": this MPI service has no window")));
  }

  /// World rank `peer` is lost (or blocked for good): every pending
  /// operation that involves it fails at once with ProcessLost, later ones
  /// fail as they are submitted, and the service serves the others on.
  /// Point-to-point requests are cancelled (MPI_Cancel) and polled until MPI
  /// lets go of them (at most a grace period, then MPI_Request_free).
  /// Collectives cannot be cancelled in MPI: they are failed and no longer
  /// polled, and MPI may still touch their buffers, so keep those alive (a
  /// communicator that lost a member is unusable for collectives anyway).
  virtual void abandonPeer(Rank peer, std::string reason) = 0;

  /// The service thread: every MPI call after bootstrap is made on it (THR-1).
  virtual std::thread::id threadId() const = 0;
  virtual Stats stats() const = 0;
};

}  // namespace crown
