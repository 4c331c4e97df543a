// CROWN_CHECK_CUDA(call) and CROWN_CHECK_NCCL(call): throw crown::Error
// naming the call, the library's own error text and file:line when a CUDA or
// NCCL call fails. Private to the CUDA and NCCL targets (style.md: the core
// never sees CUDA or NCCL).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "crown/common/error.h"

namespace crown::cuda::detail {

inline void checkCuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky error before anyone else asks
  throw Error(std::string(call) + " failed: " + cudaGetErrorString(code) + " (" + file + ":" +
              std::to_string(line) + ")");
}

}  // namespace crown::cuda::detail

#define CROWN_CHECK_CUDA(call) \
  ::crown::cuda::detail::checkCuda((call), #call, __FILE__, __LINE__)
