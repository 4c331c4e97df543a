// crown::rdma::Buffer: a handle on memory registered by one proc (its owner)
// that any proc may read or write one-sided, the bytes going straight from
// memory to memory over the world's MPI window (MPI_Rget/MPI_Rput, which an
// HPC centre's MPI maps to its RDMA hardware, and to shared memory on one
// host), never through the owner's actors or the controller.
//
// A Buffer is a plain value (owner rank, address, size, registration id):
// it serializes into any message, so an actor can hand one to the
// controller, which hands it to another actor, which reads from it. Every
// transfer first asks the owner's rdma agent for a lease on the
// registration id (docs/rdma.md): an id that was dropped is refused, and a
// registration is detached only after its last lease ends, so a transfer
// never touches memory that was dropped (no garbage, no crash). The handle's
// address and size are only a claim: the owner refuses a transfer outside
// the registration the id names, and bytes move only where the owner's
// grant says, so no handle, however edited, reaches other memory.
//
// Thread-safe: any thread of a proc with the rdma module (every proc that
// crown's bootstrap makes) may register, transfer and drop. Futures complete
// on crown's threads (DLV-1: every one completes, with a typed error if not
// with success).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "crown/actor/future.h"
#include "crown/actor/proc.h"

namespace crown::rdma {

/// A transfer refused by the owner: the buffer was dropped (or its owner
/// actor stopped), or the request does not fit the registration (a handle
/// whose address and size lie outside it); or a single copy that met no
/// memory (EFAULT), which fails that transfer alone.
class BufferError : public Error {
 public:
  using Error::Error;
};

class Buffer {
 public:
  Buffer() = default;

  /// Registers `bytes` bytes at `data` with this thread's proc
  /// (Proc::current()); the actor this thread acts for (actingActor(): the
  /// running actor, or the one a front end's thread runs code for), if any,
  /// owns it, and its stopping drops it. `data` may be device memory that the registered
  /// DeviceMemory knows (a CUDA build: GPU memory; device_memory.h says how
  /// it moves), and so may the local memory of readInto and writeFrom. `readOnly`: writeFrom is
  /// refused. The memory must stay valid until the registration ends (drop()'s
  /// future completes): either the caller keeps it (an actor that registers its own members and
  /// lets its stopping drop them must drop() them and wait in its destructor: a transfer may
  /// still be running as it stops), or `keep` does: the registration holds `keep` (what owns
  /// the memory: a Python front end's tensor) and lets go of it once it has ended, that is once
  /// no transfer can touch the memory (a drop() from any proc, the owner actor's stop, the
  /// proc's stop), on the thread that ended it (the pool's, mostly), before drop()'s future
  /// completes. Throws ConfigError for 0 bytes or a null pointer; crown::Error when the MPI
  /// window takes no more memory (Open MPI attaches 64 regions by default).
  static Buffer registerMemory(void* data, std::size_t bytes, bool readOnly = false,
                               std::shared_ptr<void> keep = nullptr);
  static Buffer registerMemory(Proc& proc, void* data, std::size_t bytes, bool readOnly = false,
                               std::shared_ptr<void> keep = nullptr);

  /// Copies the whole buffer into `dst` (`capacity` bytes, at least size());
  /// ConfigError before anything moves when it is smaller. Fails with
  /// BufferError (dropped), ProcessLost (the owner died, within the
  /// heartbeat bound) or Timeout after `timeout`, after which the buffer is
  /// as usable as before. `dst` must stay valid until the future completes.
  Future<void> readInto(void* dst, std::size_t capacity,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  /// Copies `bytes` bytes (at most size()) from `src` to the start of the buffer.
  Future<void> writeFrom(const void* src, std::size_t bytes,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60)) const;
  /// Ends the registration: later transfers fail with BufferError; the
  /// future completes once no transfer can touch the memory any more (the
  /// owner detached it and let go of its `keep`), from the owner's proc and
  /// from any other alike. From any proc; idempotent.
  Future<void> drop() const;
  /// drop(), with the reason later transfers' errors give ("... was <why>");
  /// on another proc than the owner's, the reason is "dropped".
  Future<void> dropBecause(const std::string& why) const;

  /// The same, from `proc` rather than Proc::current().
  Future<void> readInto(Proc& proc, void* dst, std::size_t capacity,
                        std::chrono::milliseconds timeout) const;
  Future<void> writeFrom(Proc& proc, const void* src, std::size_t bytes,
                         std::chrono::milliseconds timeout) const;
  Future<void> drop(Proc& proc) const;

  bool valid() const { return id_ != 0; }
  Rank owner() const { return owner_; }
  /// The local id of the actor that registered it (0: none, the proc itself).
  std::uint64_t ownerActor() const { return ownerActor_; }
  /// Where the owner's window named the memory when it was registered: the
  /// handle's claim, which the owner checks against the registration (the
  /// bytes move where the owner says, never here).
  std::uint64_t address() const { return address_; }
  std::size_t size() const { return static_cast<std::size_t>(bytes_); }
  std::uint64_t id() const { return id_; }
  bool readOnly() const { return readOnly_; }
  std::string describe() const;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& owner_& ownerActor_& address_& bytes_& id_& readOnly_;
  }

  /// For the rdma module and for decoding.
  Buffer(Rank owner, std::uint64_t ownerActor, std::uint64_t address, std::uint64_t bytes,
         std::uint64_t id, bool readOnly)
      : owner_(owner),
        ownerActor_(ownerActor),
        address_(address),
        bytes_(bytes),
        id_(id),
        readOnly_(readOnly) {}

 private:
  Rank owner_ = 0;
  std::uint64_t ownerActor_ = 0;
  std::uint64_t address_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t id_ = 0;
  bool readOnly_ = false;
};

/// One proc's RDMA bookkeeping, for tests and status.
struct Stats {
  std::size_t registered = 0;  ///< registrations alive (not dropped) on this proc
  std::size_t leases = 0;      ///< owner side: leases granted and not yet released
  std::size_t held = 0;        ///< reader side: leases this proc holds (reused until revoked)
  std::size_t inFlight = 0;    ///< reader side: transfers started here and not yet ended
  std::size_t attached = 0;    ///< regions attached to the MPI window (the whole process)
  bool window = false;         ///< one-sided MPI is in use (false: the fabric fallback)
  bool cudaAwareMpi = false;   ///< MPI moves GPU memory itself (else it is staged: docs/rdma.md)
  bool deviceMemory = false;   ///< this build can register device memory (device_memory.h)
  std::size_t staged = 0;      ///< registrations of device memory behind a pinned mirror
  std::uint64_t fallbackTransfers = 0;    ///< transfers made over crown's fabric
  std::uint64_t singleCopyTransfers = 0;  ///< transfers copied with process_vm_readv/writev
  std::size_t deadlines = 0;  ///< reader side: transfer timeouts still armed (ended ones go)
};
Stats stats(Proc& proc);

}  // namespace crown::rdma
