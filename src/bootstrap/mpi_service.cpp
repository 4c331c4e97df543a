#include "bootstrap/mpi_service.h"

#include "crown/common/blocking.h"

namespace crown::detail {

MpiService::MpiService() : thread_([this] { loop(); }) {}

MpiService::~MpiService() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void MpiService::call(std::function<void()> fn) {
  std::packaged_task<void()> task(std::move(fn));
  auto done = task.get_future();
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
  detail::BlockingScope blocking;  // a pool thread waiting on MPI lets its pool compensate
  done.get();
}

void MpiService::loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace crown::detail
