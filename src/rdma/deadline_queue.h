// DeadlineQueue: the deadlines of a proc's RDMA transfers, all behind one
// pool timer armed for the earliest. A transfer that ends cancels its entry
// at the cost of a map erase, where a timer per transfer (60 s by default)
// would stay queued in the pool, holding its transfer's state, for the whole
// timeout: a loop of small reads piled up millions of them.
//
// Thread-safe. Expiries run on the pool, outside the queue's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "crown/common/executor.h"

namespace crown::rdma::detail {

class DeadlineQueue : public std::enable_shared_from_this<DeadlineQueue> {
 public:
  using Clock = std::chrono::steady_clock;

  explicit DeadlineQueue(std::shared_ptr<Executor> pool) : pool_(std::move(pool)) {}

  /// Runs `expire` on the pool once `timeout` has passed, unless
  /// cancel(token) came first; returns the token.
  std::uint64_t add(std::chrono::milliseconds timeout, std::function<void()> expire);
  /// Forgets the entry (a no-op once it expired).
  void cancel(std::uint64_t token);
  /// Entries not yet expired or cancelled (for tests).
  std::size_t size() const;

 private:
  void armFor(Clock::time_point due);  // under mutex_
  void sweep();

  std::shared_ptr<Executor> pool_;
  mutable std::mutex mutex_;
  std::set<std::pair<Clock::time_point, std::uint64_t>> order_;  // (due, token)
  std::map<std::uint64_t, std::pair<Clock::time_point, std::function<void()>>> entries_;
  std::uint64_t next_ = 1;
  std::optional<Clock::time_point> armed_;  // the earliest due a pool timer will sweep at
};

}  // namespace crown::rdma::detail
