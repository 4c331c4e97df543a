#include <nccl.h>

#include "crown/cuda/nccl.h"
#include "cuda/nccl_check.h"

namespace crown::cuda {

int ncclVersion() {
  int version = 0;
  try {
    CROWN_CHECK_NCCL(ncclGetVersion(&version));
  } catch (const Error&) {
    return 0;  // as documented: 0 when the library cannot say
  }
  return version;
}

}  // namespace crown::cuda
