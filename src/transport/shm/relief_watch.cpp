#include "transport/shm/relief_watch.h"

#include <algorithm>

#include "crown/common/env.h"

namespace crown::transport::shm {

std::chrono::microseconds ReliefWatch::budgetFromEnv() {
  return std::chrono::microseconds(env::integer("CROWN_INLINE_BUDGET_US", 2000, 100, 60000000));
}

ReliefWatch::ReliefWatch(std::chrono::microseconds budget)
    : budget_(budget), thread_([this] { main(); }) {}

ReliefWatch::~ReliefWatch() { stop(); }

void ReliefWatch::watch(std::weak_ptr<ReaderTurns> link) {
  std::lock_guard lock(mutex_);
  links_.push_back(std::move(link));
}

void ReliefWatch::busy() {
  begun_.fetch_add(1);
  if (asleep_.load()) {  // only the first handler after an idle spell wakes the watch
    std::lock_guard lock(mutex_);
    asleep_.store(false);
    cv_.notify_one();
  }
}

void ReliefWatch::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void ReliefWatch::main() {
  std::unique_lock lock(mutex_);
  std::uint64_t seen = begun_.load();
  while (!stopped_) {
    auto now = ReaderTurns::Clock::now();
    bool running = false;
    std::erase_if(links_, [](const auto& link) { return link.expired(); });
    for (const auto& weak : links_) {
      auto link = weak.lock();
      auto since = link ? link->inlineSince() : std::nullopt;
      if (!since) continue;
      running = true;
      if (now - *since >= budget_) link->relieve(*since);
    }
    if (running || begun_.load() != seen) {
      // A handler runs, or short ones keep beginning: look again a budget
      // later (never at once: a stream of short handlers would keep this
      // thread looking, on a core the handlers need).
      seen = begun_.load();
      cv_.wait_for(lock, budget_);
      continue;
    }
    // Idle since the last look: asleep first, then a last look, so a busy()
    // that came in between sees the flag, or its count is seen here.
    asleep_.store(true);
    if (begun_.load() == seen) cv_.wait(lock, [this] { return stopped_ || !asleep_.load(); });
    asleep_.store(false);
    seen = begun_.load();
  }
}

}  // namespace crown::transport::shm
