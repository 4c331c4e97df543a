#include <nccl.h>

#include "crown/cuda/nccl.h"

namespace crown::cuda {

int ncclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 0;
  return version;
}

}  // namespace crown::cuda
