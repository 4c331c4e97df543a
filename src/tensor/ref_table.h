// RefTable: an engine's refs, each this proc's shard or the Failure that
// poisoned it (deferred errors: a command whose input is poisoned defines
// its results with the same root cause and does not run). Owned by one
// engine, used on its thread only.
#pragma once

#include <memory>
#include <unordered_map>
#include <variant>

#include "crown/tensor/command.h"

namespace crown::tensor::detail {

class RefTable {
 public:
  using Poison = std::shared_ptr<const Failure>;
  using Value = std::variant<LocalTensor, Poison>;

  void define(RefId ref, LocalTensor tensor) { values_[ref] = std::move(tensor); }
  void poison(RefId ref, Poison failure) { values_[ref] = std::move(failure); }
  /// Null when `ref` is not defined here.
  const Value* find(RefId ref) const {
    auto it = values_.find(ref);
    return it == values_.end() ? nullptr : &it->second;
  }
  void erase(RefId ref) { values_.erase(ref); }
  std::size_t size() const { return values_.size(); }

 private:
  std::unordered_map<RefId, Value> values_;
};

}  // namespace crown::tensor::detail
