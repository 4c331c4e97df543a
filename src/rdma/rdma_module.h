// RdmaModule: the rdma layer on one Proc. Two roles:
//
// Owner side (rdma_module.cpp): the registrations of this proc's memory and
// the rdma agent (a raw agent at the same system id on every proc) that
// guards them. A transfer may start only under a lease that the agent grants after
// checking the registration id (alive, not being dropped, writes allowed)
// and the handle's address and size against the region (offset and length
// within it: a handle is data anyone may have edited); the grant names where
// the lease's bytes are (window displacement, address in the owner), and the
// reader moves bytes there only, never at the handle's address. A
// registration is detached from the MPI window only when its last lease has
// ended (a drop revokes the leases readers hold, and waits for their
// Release), so a dropped buffer can never be read or written (why a lease
// and not a check word in the window: docs/rdma.md). Leases of a reader
// that is lost end with it (peerLost); registrations of an actor that stops
// are dropped with it (actorStopped), and all of them when the proc stops;
// nothing else ends a registration (a handle is a plain value: none of its
// copies going away does). What owns the memory (Region::keep: a Python
// tensor) is let go of only once the registration is retired, on the pool.
//
// Reader side (transfer.cpp): a lease (acquired on the first transfer of a
// buffer, then held and reused by later transfers of it, so the steady state
// sends no message at all), the bytes moved (the MPI window; a memcpy when
// the owner is this proc; chunks over crown's fabric where there is no
// window), with the transfer's deadline kept on the pool. A held lease ends
// when the owner revokes it (the buffer is being dropped) and no transfer
// under it is running: then the reader releases it, and the owner detaches.
//
// Owners on this machine (cma.h): the reader copies with process_vm_readv
// or process_vm_writev from its own thread, under the lease, with no hop
// through the MPI service thread (CROWN_RDMA_SAME_HOST=cma, the default;
// =mpi keeps MPI_Rget/MPI_Rput); where the kernel refuses, MPI moves it.
//
// Device memory (staging.cpp, crown/rdma/device_memory.h): without a
// CUDA-aware MPI, a registered device buffer is exposed through a pinned
// mirror, and each remote transfer of it takes the owner's staging lock
// (Stage: shared for reads, which the owner fills from the device first;
// exclusive for writes, which Unstage copies to the device), so a read
// never sees half a write; a reader's own device memory goes through a
// pinned bounce buffer.
//
// Thread-safe: regions and leases under mutex_.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "crown/actor/module.h"
#include "crown/actor/mpi_service.h"
#include "crown/rdma/buffer.h"
#include "crown/rdma/device_memory.h"
#include "rdma/deadline_queue.h"

namespace crown::rdma::detail {

struct Grant;
struct Stage;
struct Unstage;
struct Deadline;  // transfer.cpp

class RdmaModule final : public Proc::Module {
 public:
  explicit RdmaModule(std::shared_ptr<Executor> pool);
  ~RdmaModule() override;
  /// The module of `proc`; throws crown::Error when it has none.
  static RdmaModule& of(Proc& proc);

  void install(Proc& proc, SystemIds& ids) override;
  void stop() override;
  void peerLost(Rank peer, const std::string& reason) override;
  void actorStopped(std::uint64_t local) override;

  // Owner side (rdma_module.cpp).
  Buffer registerMemory(void* data, std::size_t bytes, bool readOnly, std::shared_ptr<void> keep);
  /// Ends registration `id`; the future completes once it is detached.
  Future<void> dropLocal(std::uint64_t id, const std::string& why);
  /// A lease on registration `id` for `bytes` bytes from the handle's
  /// `address`, or a refusal when any of them lies outside the region.
  Grant acquire(Rank reader, std::uint64_t id, std::uint64_t address, std::uint64_t bytes,
                bool write);
  void release(std::uint64_t lease);
  /// The memory behind a live lease, `offset` bytes past the lease's first
  /// byte (for the fallback's chunks and for a reader on the owner's own
  /// proc; device memory when the buffer is on a device: copy with
  /// copyMemory); throws BufferError when it is not one, or when the bytes
  /// reach past the region.
  char* leased(std::uint64_t lease, std::uint64_t offset, std::uint64_t bytes);

  // Owner side of staged device buffers (staging.cpp): the agent's answers.
  void stage(const wire::Envelope& request, const Stage& stage);
  void unstage(const wire::Envelope& request, const Unstage& unstage);

  // Reader side (transfer.cpp).
  Future<void> transfer(const Buffer& buffer, void* local, std::size_t bytes, bool write,
                        std::chrono::milliseconds timeout);
  Future<void> drop(const Buffer& buffer);

  /// Reader side: the owner revoked `lease` (its registration is being dropped).
  void revoked(Rank owner, std::uint64_t lease);

  Stats stats() const;
  /// The rdma agent (a raw agent): requests from readers.
  void onMessage(wire::Envelope envelope, wire::Bytes bytes);
  Proc& proc() const { return *proc_; }
  std::uint64_t agentId() const { return agent_; }

 private:
  struct StageRequest {  // a Stage: its request, to answer once the lock is taken
    wire::Envelope request;
    std::uint64_t lease = 0;
    std::uint64_t bytes = 0;
    bool write = false;
  };
  struct Region {
    char* base = nullptr;
    std::size_t bytes = 0;
    std::uint64_t address = 0;
    std::uint64_t ownerActor = 0;
    bool readOnly = false;
    bool attached = false;         // to the MPI window
    char* staging = nullptr;       // device memory's pinned mirror in the window (else null)
    bool exposedOnHost = true;     // the window exposes host memory (a single copy may reach it)
    std::size_t stageReaders = 0;  // the staging lock: transfers that Staged and not Unstaged
    bool stageWriter = false;
    std::deque<StageRequest> stageWaiting;  // Stages queued behind the lock, in arrival order
    std::size_t leases = 0;
    bool dropping = false;
    std::string dropReason;
    std::vector<std::shared_ptr<crown::detail::FutureState<void>>> dropped;
    std::shared_ptr<void> keep;  // what owns the memory, let go of once retired (may be null)
  };
  struct Lease {
    Rank reader = 0;
    std::uint64_t region = 0;
    std::uint64_t offset = 0;     // of the lease's first byte in the region (< its bytes)
    std::size_t stagedReads = 0;  // the staging lock held under this lease
    bool stagedWrite = false;
  };
  // Under mutex_: the lease `lease` and its region (a leased region is never
  // retired); throws BufferError when the lease has ended.
  std::pair<Lease&, Region&> leasedRegion(std::uint64_t lease);
  // Under mutex_: takes the staging lock for a Stage when it is free and
  // none waits before it (true), else false; the hold is counted on its lease.
  bool tryStage(Region& region, Lease& lease, bool write);
  // Under mutex_: lets go of one hold of `lease` (a write's or a read's), and
  // of all its holds when `all` (the lease ended), and moves the Stages
  // queued behind them that may now start to `start`.
  void unlockStage(Region& region, Lease& lease, bool write, bool all,
                   std::vector<StageRequest>& start);
  // Outside mutex_: unlockStage of one hold of `lease`, if it has not ended;
  // returns the Stages that may start now.
  std::vector<StageRequest> unlockStageOf(std::uint64_t lease, bool write);
  // Outside mutex_: fills each granted read's mirror from the device, on
  // the pool, and answers every Stage in `start`.
  void startStages(std::vector<StageRequest> start);

  // Under mutex_: takes `region` out of the table once its leases have
  // ended; returns what to finish outside the lock (detach, futures).
  std::unique_ptr<Region> retireIfIdle(std::uint64_t id);
  void finishRetired(std::unique_ptr<Region> region);
  void remember(std::uint64_t id, std::string why);  // under mutex_: why an id is gone
  MpiService* windowService() const;  // the MPI service when it has a window, else null

  // Reader side (transfer.cpp): the leases this proc holds.
  // Only what the owner granted says where bytes go: a handle's address
  // picks which lease (the owner checked it), never where the bytes move.
  struct Held {
    std::uint64_t region = 0;
    std::uint64_t handleAddress = 0;  // the handle's, as the owner checked it: the cache key
    std::uint64_t bytes = 0;          // the grant's: the region's bytes from the lease's start
    bool writable = false;
    std::size_t inFlight = 0;  // transfers under it not yet ended
    bool revoked = false;
    bool cached = false;  // the one later transfers of its buffer reuse
    bool staged = false;  // its buffer is device memory behind a pinned mirror (Stage first)
    int pid = 0;          // the owner's pid when it runs on this machine (single copy), else 0
    std::uint64_t address = 0;  // the grant's window displacement of the lease's first byte
    std::uint64_t memory = 0;   // the grant's address of it in the owner (with pid)
  };
  /// How the transfers under a held lease go, and where: the owner's values.
  struct Route {
    std::uint64_t lease = 0;  // 0: no lease held covers the transfer
    bool staged = false;
    int pid = 0;
    std::uint64_t address = 0;  // window displacement (MPI)
    std::uint64_t memory = 0;   // address in the owner's process (a single copy, pid != 0)
  };
  using LeaseKey = std::pair<Rank, std::uint64_t>;  // (owner, lease): lease ids are the owner's
  // (owner, region id, the handle's address) -> the lease later transfers reuse.
  using CacheKey = std::tuple<Rank, std::uint64_t, std::uint64_t>;
  /// A held lease that covers the transfer, its inFlight counted (lease 0: none).
  Route reuse(const Buffer& buffer, std::size_t bytes, bool write);
  /// Under heldMutex_: how transfers go under `held`, lease `lease` of `owner`.
  Route routeOf(Rank owner, std::uint64_t lease, const Held& held) const;
  /// A lease just granted, held with one transfer under it.
  Route hold(const Buffer& buffer, const Grant& grant);
  /// A transfer under `lease` ended: releases the lease when it was revoked meanwhile.
  void endTransfer(Rank owner, std::uint64_t lease);
  void sendRelease(Rank owner, std::uint64_t lease);
  void sendRevoke(Rank reader, std::uint64_t lease);

  // Reader side helpers (transfer.cpp).
  void moveBytes(const Buffer& buffer, Route route, char* local, std::size_t bytes, bool write,
                 std::shared_ptr<crown::detail::FutureState<void>> user,
                 std::shared_ptr<Deadline> deadline);
  /// The bytes to or from the owner's memory where `route` (the grant)
  /// says: local device memory through a pinned bounce buffer unless MPI is
  /// CUDA-aware and moves it; then hostMove. Completes once `local` is let go of.
  Future<void> windowMove(MpiService& mpi, Rank owner, const Route& route, char* local,
                          std::size_t bytes, bool write, std::shared_ptr<std::atomic<bool>> stop);
  /// A single copy at route.memory when route.pid names the owner on this
  /// machine (on this thread up to kInlineCopyBytes, else on the pool), else
  /// (or where the kernel refuses) MPI_Rget/MPI_Rput at route.address. A
  /// copy that meets no memory (EFAULT) fails alone, with BufferError.
  Future<void> hostMove(MpiService& mpi, Rank owner, const Route& route, char* local,
                        std::size_t bytes, bool write, std::shared_ptr<std::atomic<bool>> stop);
  /// The kernel refused a single copy to `owner` (EPERM: ptrace rules): MPI
  /// moves its bytes from now on.
  void refuseCma(Rank owner, int error);
  /// The end of a window transfer with `outcome` (null: it moved): an MPI
  /// refusal moves it over the fabric instead; else the lease goes back and
  /// the caller hears.
  void settle(const Buffer& buffer, std::uint64_t lease, char* local, std::size_t bytes, bool write,
              std::shared_ptr<crown::detail::FutureState<void>> user,
              std::shared_ptr<Deadline> deadline, std::function<void()> release,
              std::exception_ptr outcome);
  /// Reader side of a staged buffer (staging.cpp): Stage, move, Unstage.
  void stagedMove(MpiService& mpi, const Buffer& buffer, Route route, char* local,
                  std::size_t bytes, bool write,
                  std::shared_ptr<crown::detail::FutureState<void>> user,
                  std::shared_ptr<Deadline> deadline, std::function<void()> release);
  void fallback(const Buffer& buffer, std::uint64_t lease, char* local, std::size_t bytes,
                bool write, std::shared_ptr<crown::detail::FutureState<void>> user,
                std::shared_ptr<Deadline> deadline, std::function<void()> release);

  std::shared_ptr<Executor> pool_;
  std::shared_ptr<DeviceMemory> device_;      // null: every pointer is host memory
  std::shared_ptr<DeadlineQueue> deadlines_;  // the transfers' timeouts
  bool singleCopy_ = true;                    // CROWN_RDMA_SAME_HOST=cma
  std::atomic<std::uint64_t> singleCopyTransfers_{0};
  Proc* proc_ = nullptr;
  MpiService* mpi_ = nullptr;  // null where the proc has none (simulated procs)
  std::uint64_t agent_ = 0;
  bool windowWanted_ = true;

  std::mutex attachMutex_;  // attachments_ (taken before mutex_, never inside it)
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Region> regions_;
  std::unordered_map<std::uint64_t, Lease> leases_;
  std::unordered_map<std::uint64_t, std::string> gone_;  // why recent ids went (bounded)
  std::deque<std::uint64_t> goneOrder_;
  // MPI may refuse memory attached twice: registrations of the same bytes
  // share one attachment, counted. (base, bytes) -> (address, count).
  std::map<std::pair<char*, std::size_t>, std::pair<std::uint64_t, int>> attachments_;
  std::uint64_t nextId_ = 1;
  std::uint64_t nextLease_ = 1;
  bool stopped_ = false;
  std::atomic<bool> stopping_{false};                  // stop() began: detach in place
  static inline thread_local bool detaching_ = false;  // finishRetired runs on the pool
  std::atomic<std::uint64_t> fallbackTransfers_{0};
  mutable std::mutex heldMutex_;  // held_, cached_, inFlight_ (never taken with mutex_)
  std::map<LeaseKey, Held> held_;
  std::map<CacheKey, std::uint64_t> cached_;
  std::set<Rank> cmaRefused_;  // owners the kernel would not let this process copy from
  std::size_t inFlight_ = 0;
  std::atomic<bool> warnedFallback_{false};
};

}  // namespace crown::rdma::detail
