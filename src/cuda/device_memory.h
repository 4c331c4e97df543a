// CudaDeviceMemory: the rdma layer's DeviceMemory (crown/rdma/device_memory.h)
// over the CUDA runtime: device pointers by cudaPointerGetAttributes, copies
// by cudaMemcpy (cudaMemcpyDefault: unified addressing tells the direction),
// pinned staging by cudaHostAlloc. Private to the CUDA targets.
#pragma once

#include "crown/rdma/device_memory.h"

namespace crown::cuda {

class CudaDeviceMemory final : public rdma::DeviceMemory {
 public:
  CudaDeviceMemory();
  /// False for every pointer when this machine has no CUDA device.
  bool isDevice(const void* p) const override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void* allocateStaging(std::size_t bytes) override;
  void freeStaging(void* p, std::size_t bytes) override;

 private:
  bool devices_ = false;  // probed once: without a driver every call would fail anyway
};

}  // namespace crown::cuda
