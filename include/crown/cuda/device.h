// GPU discovery, in the crown_cuda target (built when CUDA is found). Tensor
// and NCCL layers build on it; the core never includes it.
#pragma once

namespace crown::cuda {

/// Visible CUDA devices; 0 when there is no driver or no device.
int deviceCount();
/// The CUDA runtime's version (e.g. 13000), known without a driver.
int runtimeVersion();

}  // namespace crown::cuda
