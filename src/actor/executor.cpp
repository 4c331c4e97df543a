#include "actor/executor.h"

#include "crown/common/spin_wait.h"

namespace crown::detail {

Executor::Executor(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

Executor::~Executor() { stop(); }

void Executor::post(std::function<void()> task) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
    queued_.store(tasks_.size(), std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) wake_.notify_one();  // a spinning thread needs no futex wake-up
}

void Executor::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
  threads_.clear();
}

void Executor::work() {
  for (;;) {
    std::function<void()> task;
    detail::spinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
    {
      std::unique_lock lock(mutex_);
      ++sleeping_;
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      --sleeping_;
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.store(tasks_.size(), std::memory_order_release);
    }
    task();
  }
}

}  // namespace crown::detail
