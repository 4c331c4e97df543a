// A stream's thread and queue, and the Latch of borrows.
#include "tensor/stream_thread.h"

namespace crown::tensor::detail {

StreamThread::StreamThread(std::size_t bound) : bound_(bound), thread_([this] { main(); }) {}

StreamThread::~StreamThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StreamThread::post(std::function<void()> task) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return queue_.size() < bound_; });
  queue_.push_back(std::move(task));
  changed_.notify_all();
}

void StreamThread::drain() {
  Latch done;
  post([&done] { done.set(); });
  done.wait();
}

void StreamThread::main() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, with nothing left to run
    auto task = std::move(queue_.front());
    queue_.pop_front();
    changed_.notify_all();  // room for a waiting post()
    lock.unlock();
    task();
    lock.lock();
  }
}

void Latch::set() {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  set_.notify_all();
}

bool Latch::isSet() {
  std::lock_guard lock(mutex_);
  return done_;
}

void Latch::wait() {
  std::unique_lock lock(mutex_);
  set_.wait(lock, [this] { return done_; });
}

}  // namespace crown::tensor::detail
