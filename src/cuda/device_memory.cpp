// CudaDeviceMemory (cuda/device_memory.h), and its registration: every
// program that links Crown::crown with CUDA gets it before main, as NCCL's
// collectives (nccl_registrar.cpp says how: this archive is linked whole).
// A program that registers its own (a test's stand-in) keeps it.
#include "cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "crown/cuda/device.h"
#include "cuda/cuda_check.h"

namespace crown::cuda {

CudaDeviceMemory::CudaDeviceMemory() : devices_(deviceCount() > 0) {}

bool CudaDeviceMemory::isDevice(const void* p) const {
  if (!devices_ || p == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // not a pointer CUDA knows: host memory
    return false;
  }
  // Managed memory is reachable from the host too, but MPI's single-copy
  // paths may not page it in: treat it as the device's.
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
