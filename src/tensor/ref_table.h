// RefTable: an engine's refs, each this proc's shard or the Failure that
// poisoned it (deferred errors: a command whose input is poisoned defines
// its results with the same root cause and does not run). Owned by one
// engine and shared by its streams: every method takes the table's lock,
// and a lookup hands out a copy (a LocalTensor shares its memory and its
// layout: no allocation).
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <variant>

#include "crown/tensor/command.h"

namespace crown::tensor::detail {

class RefTable {
 public:
  using Poison = std::shared_ptr<const Failure>;
  using Value = std::variant<LocalTensor, Poison>;

  void define(RefId ref, Value value) {
    Value old;  // what this replaces, freed after the lock (an owner may take Python's GIL)
    std::lock_guard lock(mutex_);
    auto it = values_.find(ref);
    if (it != values_.end()) {
      old = std::exchange(it->second, std::move(value));
      return;
    }
    if (erased_.empty()) {
      values_.emplace(ref, std::move(value));
      return;
    }
    auto node = std::move(erased_.front());
    erased_.pop_front();
    old = std::move(node.mapped());  // a small shard erased earlier: its memory goes now
    node.key() = ref;
    node.mapped() = std::move(value);
    values_.insert(std::move(node));
  }
  void poison(RefId ref, Poison failure) { define(ref, std::move(failure)); }
  /// Empty when `ref` is not defined here.
  std::optional<Value> find(RefId ref) const {
    std::lock_guard lock(mutex_);
    auto it = values_.find(ref);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  /// Forgets `ref`; a small CPU shard's memory goes with the next define.
  void erase(RefId ref) {
    Values::node_type dropped;  // freed after the lock, as define's `old`
    Value gone;
    std::lock_guard lock(mutex_);
    auto node = values_.extract(ref);
    if (node.empty()) return;
    if (!keptUntilReused(node.mapped())) gone = std::exchange(node.mapped(), Value());
    if (erased_.size() >= kErased) {
      dropped = std::move(erased_.front());
      erased_.pop_front();
    }
    erased_.push_back(std::move(node));
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return values_.size();
  }

 private:
  using Values = std::unordered_map<RefId, Value>;
  // Erased refs' nodes, oldest first, reused by the next refs defined (a
  // loop defines a ref per op and the controller deletes them 64 at a
  // time: a node each way was a malloc and a free per op). A small CPU
  // shard stays in its node until the node is reused, so that its memory
  // (torch's tensor, storage and data) is freed one shard per define, just
  // after the new shard was made, rather than 64 at once: glibc's malloc
  // keeps a few freed blocks of a size per thread for the next malloc, and
  // a burst of 64 overflowed them into its slower bins (issue 45). At most
  // kErased nodes, each shard at most kKeptBytes: a bounded delay, on
  // memory that no command can name any more.
  static constexpr std::size_t kErased = 256;
  static constexpr std::size_t kKeptBytes = 4096;
  static bool keptUntilReused(const Value& value) {
    const auto* shard = std::get_if<LocalTensor>(&value);
    return shard != nullptr && shard->device().kind == DeviceKind::cpu &&
           shard->nbytes() <= kKeptBytes;
  }

  mutable std::mutex mutex_;
  Values values_;
  std::deque<Values::node_type> erased_;
};

}  // namespace crown::tensor::detail
