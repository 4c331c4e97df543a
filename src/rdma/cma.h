// Single-copy transfers between processes of one machine (cross-memory
// attach: process_vm_readv/process_vm_writev), as MPI's shared-memory
// transport makes them for MPI_Get/MPI_Put, but from the thread that asks,
// with no hop through the MPI service thread (a tenth of a 1 MiB read's time
// on a loaded machine: docs/rdma.md). The rdma module uses it for owners on
// this machine, under the same lease as any transfer. No MPI call is made
// (THR-1 stands): the kernel copies between the two address spaces.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace crown::rdma::detail {

/// Names this machine and pid namespace (the boot id and the namespace's
/// inode): two processes that give the same name can address each other by
/// pid. Empty when it cannot be known (then never equal to another's).
const std::string& machineId();

enum class CmaOutcome {
  kMoved,     // every byte, or up to the point where *stop was set
  kRefused,   // the kernel will not let this process reach that one (EPERM: ptrace rules)
  kNoMemory,  // an address with no memory behind it, at either end (EFAULT): this copy's error
  kFailed,    // another error of this copy alone (ENOMEM, ...); the next may go
};
struct CmaResult {
  CmaOutcome outcome = CmaOutcome::kMoved;
  int error = 0;  // errno, unless kMoved
};

/// Copies `bytes` bytes between `local` and the memory at `address` of
/// process `pid` (write: from local to it), in chunks of `chunk` bytes, and
/// stops between chunks once `stop` is set. Throws CmaPeerGone when the
/// process is gone (errno ESRCH; the caller names the peer). Only kRefused
/// says anything about later copies; the caller must have the address from
/// the owner (its grant), never from a handle.
CmaResult cmaMove(int pid, std::uint64_t address, char* local, std::size_t bytes, bool write,
                  std::size_t chunk, const std::atomic<bool>& stop);

/// Thrown by cmaMove when the process is gone.
struct CmaPeerGone {};

}  // namespace crown::rdma::detail
