// Kernels: what a Call command runs, found by name in one process-wide
// registry. The native ones (kernels.cpp: fill, zeros, ones, arange, rand,
// add, sub, mul, div, matmul, sum, mean) let a C++ controller do real work
// without Python; front ends register their own (Python's "torch" runs any
// torch op with real torch). Registration is thread-safe; a kernel runs on
// the engine's stream thread and may throw: that poisons its results.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "crown/common/error.h"
#include "crown/tensor/command.h"
#include "crown/tensor/local_tensor.h"

namespace crown::tensor {

/// What a kernel sees besides its inputs.
struct KernelContext {
  const Call& call;
  Rank rank = 0;                                ///< this proc's world rank
  /// Its coordinates in the engine's mesh: the engine's own map, not a copy per call.
  const std::map<std::string, std::size_t>& coords;
  std::mt19937_64& generator;                   ///< seeded per rank (rand)
};

/// What a kernel may throw to say more than a message: the op that failed
/// (a front end's, such as "aten::mm") and the worker's traceback.
class KernelError : public Error {
 public:
  KernelError(std::string op, std::string message, std::string traceback)
      : Error(message), op_(std::move(op)), traceback_(std::move(traceback)) {}
  const std::string& op() const { return op_; }
  const std::string& traceback() const { return traceback_; }

 private:
  std::string op_, traceback_;
};

/// Returns one tensor per result of the call, in order.
using Kernel = std::function<std::vector<LocalTensor>(KernelContext& context,
                                                      const std::vector<LocalTensor>& inputs)>;

/// Registers (or replaces) the kernel called `name`.
void registerKernel(const std::string& name, Kernel kernel);
/// The kernel called `name`, or an empty function.
Kernel findKernel(const std::string& name);
/// Names of every registered kernel, sorted (for error messages).
std::vector<std::string> kernelNames();

/// What consecutive calls of one kernel in a batch run under: the engine
/// takes one guard for the whole run of them instead of each call taking
/// its own (Python's takes the GIL once for a run of torch ops: on a rank
/// whose controller records meanwhile, each acquisition may wait for
/// Python's switch interval). Returns an object whose destruction ends it.
using KernelGuard = std::function<std::shared_ptr<void>()>;
void registerKernelGuard(const std::string& kernel, KernelGuard guard);
/// The guard of `kernel`, or an empty function.
KernelGuard findKernelGuard(const std::string& kernel);

}  // namespace crown::tensor
