// One recorded torch op in its native form (crown/tensor/_native.py writes
// it as JSON): the ATen operator, its boxed arguments with the shards' places
// left open, and which of its outputs are the call's results. Made once per
// distinct op and kept (PreparedOps), then run on every call of it.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "crown/tensor/local_tensor.h"

namespace crown::python::aten {

/// What the native path does not take (an argument type it cannot make, a
/// GPU shard): the op runs in Python instead.
struct NotNative {};

class PreparedOp {
 public:
  /// Throws NotNative when the op is not for the native path.
  explicit PreparedOp(std::string_view spec);
  /// "aten::mul.Tensor", for errors.
  const std::string& name() const { return name_; }
  /// Runs it on the shards; throws what ATen throws, or NotNative.
  std::vector<tensor::LocalTensor> run(const std::vector<tensor::LocalTensor>& inputs) const;

 private:
  struct Slot {
    std::size_t position;             // in the stack
    std::vector<std::size_t> inputs;  // indices among the call's inputs
    bool list;                        // a list of tensors (cat), not one
  };
  std::string name_;
  c10::optional<c10::OperatorHandle> op_;
  std::vector<c10::IValue> arguments_;  // the stack, the slots' places empty
  std::vector<Slot> slots_;
  std::vector<std::int64_t> picks_;  // _execute.py's picks
  // add/sub/mul/div of one float32 shard and a Python number: the number,
  // wrapped as float32 beforehand, at its place in the stack (see run()).
  std::vector<std::pair<std::size_t, c10::IValue>> float32Numbers_;
};

/// This thread's prepared ops by spec (each stream thread has its own: no
/// locks). nullptr for a spec that is not for the native path.
class PreparedOps {
 public:
  const PreparedOp* find(std::string_view spec);

 private:
  static constexpr std::size_t kLimit = 4096;  // a loop repeats a few specs
  struct Hash {  // looked up by the spec's view: no copy per call
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::unique_ptr<PreparedOp>, Hash, std::equal_to<>> ops_;
};

}  // namespace crown::python::aten
