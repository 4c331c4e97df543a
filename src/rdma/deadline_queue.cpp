// DeadlineQueue (deadline_queue.h).
#include "rdma/deadline_queue.h"

#include <vector>

namespace crown::rdma::detail {

std::uint64_t DeadlineQueue::add(std::chrono::milliseconds timeout, std::function<void()> expire) {
  auto due = Clock::now() + timeout;
  std::lock_guard lock(mutex_);
  std::uint64_t token = next_++;
  order_.emplace(due, token);
  entries_.emplace(token, std::make_pair(due, std::move(expire)));
  if (!armed_ || due < *armed_) armFor(due);
  return token;
}

void DeadlineQueue::cancel(std::uint64_t token) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(token);
  if (it == entries_.end()) return;
  order_.erase({it->second.first, token});
  entries_.erase(it);
  // The armed timer stays: it sweeps nothing, or re-arms for what is left.
}

std::size_t DeadlineQueue::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void DeadlineQueue::armFor(Clock::time_point due) {
  armed_ = due;
  auto delay = std::chrono::ceil<std::chrono::milliseconds>(due - Clock::now());
  // Weak: a queue that goes (its proc stopped) leaves its timers nothing to do.
  pool_->after(std::max(delay, std::chrono::milliseconds(0)), [weak = weak_from_this()] {
    if (auto self = weak.lock()) self->sweep();
  });
}

void DeadlineQueue::sweep() {
  std::vector<std::function<void()>> expired;
  {
    std::lock_guard lock(mutex_);
    auto now = Clock::now();
    while (!order_.empty() && order_.begin()->first <= now) {
      auto token = order_.begin()->second;
      order_.erase(order_.begin());
      auto it = entries_.find(token);
      expired.push_back(std::move(it->second.second));
      entries_.erase(it);
    }
    // This timer was the earliest one armed, or a stale one (an entry it was
    // armed for was cancelled): either way, arm for what is left, once.
    armed_.reset();
    if (!order_.empty()) armFor(order_.begin()->first);
  }
  for (auto& expire : expired) expire();
}

}  // namespace crown::rdma::detail
