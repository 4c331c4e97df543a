// CudaDeviceMemory (cuda/device_memory.h), and its registration: every
// program that links Crown::crown with CUDA gets it before main, as NCCL's
// collectives (nccl_registrar.cpp says how: this archive is linked whole).
// A program that registers its own (a test's stand-in) keeps it. Nothing
// here touches CUDA before a pointer is asked about.
#include "cuda/device_memory.h"

#include <cuda_runtime_api.h>
#include <sys/uio.h>
#include <unistd.h>

#include <memory>
#include <mutex>

#include "crown/cuda/device.h"
#include "cuda/cuda_check.h"

namespace crown::cuda {
namespace {

// Whether this process can read the byte at `p` itself: all host memory
// (pageable, pinned, or managed) can, device memory cannot (its addresses
// are reserved without access). A syscall that reads our own memory says so
// without a fault, and without CUDA.
bool readableHere(const void* p) {
  char byte = 0;
  iovec local{&byte, 1};
  iovec remote{const_cast<void*>(p), 1};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == 1;
}

}  // namespace

CudaDeviceMemory::CudaDeviceMemory() = default;

bool CudaDeviceMemory::isDevice(const void* p) const {
  // Asked lazily: a program that never registers memory never loads the
  // driver for it. cudaGetDeviceCount initialises the driver, no context.
  static std::once_flag probed;
  static bool devices = false;
  std::call_once(probed, [] { devices = deviceCount() > 0; });
  // Host memory is told apart first, with no CUDA call: asking the runtime
  // about a pointer makes a CUDA context (hundreds of MiB of GPU memory) in
  // a process that may never use the GPU.
  if (!devices || p == nullptr || readableHere(p)) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // not a pointer CUDA knows
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void CudaDeviceMemory::copy(void* dst, const void* src, std::size_t bytes) {
  CROWN_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void* CudaDeviceMemory::allocateStaging(std::size_t bytes) {
  void* p = nullptr;
  CROWN_CHECK_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void CudaDeviceMemory::freeStaging(void* p, std::size_t) { CROWN_CHECK_CUDA(cudaFreeHost(p)); }

namespace {

const bool kRegistered = [] {
  if (!rdma::deviceMemory()) rdma::registerDeviceMemory(std::make_shared<CudaDeviceMemory>());
  return true;
}();

}  // namespace
}  // namespace crown::cuda
