// A fixed pool of threads running posted tasks in FIFO order. Actors'
// mailboxes are drained on it. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace crown::detail {

class Executor {
 public:
  explicit Executor(int threads);
  ~Executor();
  void post(std::function<void()> task);
  /// Runs what is queued, then joins the threads.
  void stop();

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<std::size_t> queued_{0};  // tasks_.size(), readable without the mutex
  int sleeping_ = 0;                    // threads blocked on wake_
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace crown::detail
