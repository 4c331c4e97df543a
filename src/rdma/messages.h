// What readers and the owner's rdma agent say to each other (rdma_module.h).
#pragma once

#include <cstdint>
#include <string>

#include "crown/actor/proc.h"
#include "crown/common/error.h"
#include "crown/wire/serialize.h"

namespace crown::rdma::detail {

/// Reader -> owner: may a transfer of `bytes` bytes start on registration
/// `id`, at `address`? The address is the handle's, which anyone may have
/// edited: the owner checks it against the registration and answers with
/// the place the bytes are, which is all the reader uses.
struct Acquire {
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
  bool write = false;
  Rank reader = 0;            // whose loss ends the lease
  std::uint64_t address = 0;  // where the handle says the buffer starts
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& id& bytes& write& reader& address;
  }
};

/// Owner -> reader: the lease (until Release the registration stays
/// attached; the reader keeps it for later transfers until Revoke), or why not.
/// A lease covers the registered region from the handle's address (its
/// offset in the region, checked by the owner) to the region's end; the
/// reader moves bytes only at `address` or `memory`, never at the handle's.
struct Grant {
  std::uint64_t lease = 0;  // 0: refused
  std::uint64_t bytes = 0;  // what the lease covers: the region's bytes from the offset on
  bool writable = false;
  std::string error;
  bool staged = false;  // device memory behind a pinned mirror: each transfer Stages first
  // Where the owner runs (cma.h's machineId) and its pid, when the memory
  // the window exposes is host memory: a reader on the same machine copies
  // it with process_vm_readv/writev itself. pid 0: never.
  std::string machine;
  std::int32_t pid = 0;
  // The lease's first byte, derived by the owner from its registration: its
  // displacement in the owner's window (MPI_Rget/MPI_Rput), and, with a pid,
  // its address in the owner's process (a single copy).
  std::uint64_t address = 0;
  std::uint64_t memory = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease& bytes& writable& error& staged& machine& pid& address& memory;
  }
};

inline Grant refusal(std::string why) {
  Grant grant;
  grant.error = std::move(why);
  return grant;
}

/// Owner -> reader, one way: the registration under `lease` is being
/// dropped; start nothing more under it, and Release it once the transfers
/// under it have ended.
struct Revoke {
  std::uint64_t lease = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease;
  }
};

/// Reader -> owner, one way: the transfer under `lease` has ended (MPI let go
/// of every byte of it).
struct Release {
  std::uint64_t lease = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease;
  }
};

/// Anyone -> owner: end registration `id` (its detach waits for its leases).
struct DropRegion {
  std::uint64_t id = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& id;
  }
};

/// Reader -> owner, for a buffer staged through pinned host memory
/// (device_memory.h): take the staging lock for a transfer of `bytes` bytes
/// under `lease`, shared for a read (the owner then fills the mirror from
/// the device) and exclusive for a write. The reply says the mirror is ready.
struct Stage {
  std::uint64_t lease = 0;
  std::uint64_t bytes = 0;
  bool write = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease& bytes& write;
  }
};

/// Reader -> owner: the transfer under `lease` that Staged has moved its
/// bytes (or given up): a write's are copied from the mirror to the device,
/// then the staging lock is let go. `moved`: false when a write did not
/// land whole in the mirror (then nothing goes to the device).
struct Unstage {
  std::uint64_t lease = 0;
  std::uint64_t bytes = 0;
  bool write = false;
  bool moved = true;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease& bytes& write& moved;
  }
};

/// The fallback: one chunk read or written over crown's fabric, under a lease.
struct ReadChunk {
  std::uint64_t lease = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease& offset& bytes;
  }
};
struct WriteChunk {
  std::uint64_t lease = 0;
  std::uint64_t offset = 0;
  std::string data;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& lease& offset& data;
  }
};

/// Replies to a request that the raw agent took, with `value` as a
/// handler's result of type T would be (so Proc::request<T> decodes it).
template <class T>
void replyWith(Proc& proc, const wire::Envelope& request, const T& value) {
  proc.reply(request, wire::messageName<T>(), wire::toBytes(value));
}

}  // namespace crown::rdma::detail
