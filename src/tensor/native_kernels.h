// The native kernels (fill, zeros, ones, arange, rand, add, sub, mul, div,
// matmul through BLAS, sum, mean), registered once by the first engine.
#pragma once

namespace crown::tensor::detail {

void registerNativeKernels();

}  // namespace crown::tensor::detail
