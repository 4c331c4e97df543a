// ReliefWatch: relieves a shared-memory link's reader whose handler has run
// past the budget (CROWN_INLINE_BUDGET_US, default 2000, as for IoPool's
// threads), so that the link's other frames and its heartbeats do not wait
// behind a long handler (reader_turns.h). One thread per backend: while
// handlers keep beginning it looks every budget; after a period with none
// it sleeps until the next one begins, so an idle process costs nothing.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/shm/reader_turns.h"

namespace crown::transport::shm {

class ReliefWatch {
 public:
  /// The budget from CROWN_INLINE_BUDGET_US.
  static std::chrono::microseconds budgetFromEnv();

  explicit ReliefWatch(std::chrono::microseconds budget);
  ~ReliefWatch();
  ReliefWatch(const ReliefWatch&) = delete;
  ReliefWatch& operator=(const ReliefWatch&) = delete;

  void watch(std::weak_ptr<ReaderTurns> link);
  /// A handler began on a link's reader (cheap; wakes the watch if it sleeps).
  void busy();
  /// Ends the watch's thread (idempotent).
  void stop();

 private:
  void main();

  const std::chrono::microseconds budget_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<ReaderTurns>> links_;
  std::atomic<std::uint64_t> begun_{0};
  std::atomic<bool> asleep_{false};
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace crown::transport::shm
