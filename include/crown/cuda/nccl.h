// NCCL, in the crown_nccl target (built when NCCL is found).
#pragma once

namespace crown::cuda {

/// The linked NCCL library's version code (e.g. 22703); 0 if it cannot say.
int ncclVersion();

}  // namespace crown::cuda
