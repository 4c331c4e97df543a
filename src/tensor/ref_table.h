// RefTable: an engine's refs, each this proc's shard or the Failure that
// poisoned it (deferred errors: a command whose input is poisoned defines
// its results with the same root cause and does not run). Owned by one
// engine and shared by its streams: every method takes the table's lock,
// and a lookup hands out a copy (a LocalTensor shares its memory).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <variant>

#include "crown/tensor/command.h"

namespace crown::tensor::detail {

class RefTable {
 public:
  using Poison = std::shared_ptr<const Failure>;
  using Value = std::variant<LocalTensor, Poison>;

  void define(RefId ref, Value value) {
    std::lock_guard lock(mutex_);
    values_[ref] = std::move(value);
  }
  void poison(RefId ref, Poison failure) { define(ref, std::move(failure)); }
  /// Empty when `ref` is not defined here.
  std::optional<Value> find(RefId ref) const {
    std::lock_guard lock(mutex_);
    auto it = values_.find(ref);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  void erase(RefId ref) {
    std::lock_guard lock(mutex_);
    values_.erase(ref);
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return values_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<RefId, Value> values_;
};

}  // namespace crown::tensor::detail
