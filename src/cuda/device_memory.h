// CudaDeviceMemory: the rdma layer's DeviceMemory (crown/rdma/device_memory.h)
// over the CUDA runtime: device memory is what this process cannot read
// itself and cudaPointerGetAttributes calls the device's, copies by
// cudaMemcpy (cudaMemcpyDefault: unified addressing tells the direction),
// pinned staging by cudaHostAlloc. Private to the CUDA targets.
#pragma once

#include "crown/rdma/device_memory.h"

namespace crown::cuda {

class CudaDeviceMemory final : public rdma::DeviceMemory {
 public:
  CudaDeviceMemory();
  /// False for host memory (no CUDA call is made for it), and for every
  /// pointer on a machine without a CUDA device.
  bool isDevice(const void* p) const override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void* allocateStaging(std::size_t bytes) override;
  void freeStaging(void* p, std::size_t bytes) override;
};

}  // namespace crown::cuda
