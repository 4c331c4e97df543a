// Cross-memory attach (cma.h).
#include "rdma/cma.h"

#include <sys/stat.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

namespace crown::rdma::detail {

const std::string& machineId() {
  static const std::string id = [] {
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    struct stat ns {};
    if (boot.empty() || ::stat("/proc/self/ns/pid", &ns) != 0) return std::string();
    return boot + ":" + std::to_string(ns.st_dev) + ":" + std::to_string(ns.st_ino);
  }();
  return id;
}

CmaResult cmaMove(int pid, std::uint64_t address, char* local, std::size_t bytes, bool write,
                  std::size_t chunk, const std::atomic<bool>& stop) {
  std::size_t done = 0;
  while (done < bytes && !stop.load(std::memory_order_relaxed)) {
    std::size_t n = std::min(chunk, bytes - done);
    iovec mine{local + done, n};
    iovec theirs{reinterpret_cast<void*>(address + done), n};
    ssize_t moved = write ? ::process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                          : ::process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (moved < 0) {
      int error = errno;
      if (error == EINTR) continue;
      if (error == ESRCH) throw CmaPeerGone{};
      // EFAULT is an address, not a rule of the kernel: it says nothing of
      // the next copy, so it must not turn single copies off.
      if (error == EFAULT) return {CmaOutcome::kNoMemory, error};
      if (error == EPERM || error == EACCES) return {CmaOutcome::kRefused, error};
      return {CmaOutcome::kFailed, error};
    }
    // Nothing moved and no error (a range that ends at unmapped memory moves
    // what precedes it, then fails): never spin on it.
    if (moved == 0) return {CmaOutcome::kFailed, EIO};
    done += static_cast<std::size_t>(moved);
  }
  return {};
}

}  // namespace crown::rdma::detail
