#include "crown/cuda/device.h"

#include <cuda_runtime_api.h>

#include "cuda/cuda_check.h"

namespace crown::cuda {

int deviceCount() {
  int count = 0;
  // No driver, or no device: both mean no GPU for crown.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return count;
}

int runtimeVersion() {
  int version = 0;
  CROWN_CHECK_CUDA(cudaRuntimeGetVersion(&version));
  return version;
}

}  // namespace crown::cuda
