// The seam between the _crown extension and crown._aten, which runs torch
// ops through ATen's dispatcher in C++ with no GIL. _aten links libtorch (half
// a second to load), so `import crown` never loads it: crown.tensor._worker
// imports it and hands _crown this table through a capsule
// (_crown.install_native_torch). Both are built from one tree by one compiler,
// so the table passes C++ types; nothing throws across it.
#pragma once

#include <Python.h>

#include <string>
#include <string_view>
#include <vector>

#include "crown/tensor/local_tensor.h"

namespace crown::python {

inline constexpr int kNativeTorchVersion = 2;
inline constexpr const char* kNativeTorchCapsule = "crown._aten.NativeTorch";

enum class NativeOutcome {
  ran,        ///< results hold the op's results, in order
  failed,     ///< the op raised: op and message say what
  usePython,  ///< not for the native path (a GPU input, an argument it cannot make): run it in Python
};

struct NativeTorch {
  int version = kNativeTorchVersion;
  /// Runs one recorded op: `spec` is its native form (crown/tensor/_native.py).
  /// Any thread, no GIL.
  NativeOutcome (*run)(std::string_view spec, const std::vector<tensor::LocalTensor>& inputs,
                       std::vector<tensor::LocalTensor>& results, std::string& op,
                       std::string& message) = nullptr;
  /// A new reference to a torch tensor over `tensor`'s memory (the one torch
  /// made it, when it did), or nullptr when it has none (device memory it
  /// did not make). GIL held.
  PyObject* (*toPython)(const tensor::LocalTensor& tensor) = nullptr;
  /// `object` as a shard sharing its memory, when it is a torch tensor of a
  /// type crown knows; false otherwise. GIL held.
  bool (*fromPython)(PyObject* object, tensor::LocalTensor& out) = nullptr;
  /// Whether autograd records ops on this thread now (torch.is_grad_enabled()).
  /// GIL held.
  bool (*gradEnabled)() = nullptr;
  /// Whether `object`, a torch tensor, requires grad; -1 when it is not a
  /// torch tensor. GIL held. (The controller's recording asks both,
  /// tensor_fast_record.cpp.)
  int (*requiresGrad)(PyObject* object) = nullptr;
};

}  // namespace crown::python
