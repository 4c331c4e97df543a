// CROWN_CHECK_NCCL(call): throws crown::Error naming the call, NCCL's own
// error text and file:line when an NCCL call fails. Private to the NCCL target.
#pragma once

#include <nccl.h>

#include <string>

#include "crown/common/error.h"

namespace crown::cuda::detail {

inline void checkNccl(ncclResult_t code, const char* call, const char* file, int line) {
  if (code == ncclSuccess) return;
  throw Error(std::string(call) + " failed: " + ncclGetErrorString(code) + " (" + file + ":" +
              std::to_string(line) + ")");
}

}  // namespace crown::cuda::detail

#define CROWN_CHECK_NCCL(call) \
  ::crown::cuda::detail::checkNccl((call), #call, __FILE__, __LINE__)
