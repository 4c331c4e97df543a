// InlineTasks: a thread that is not one of an executor's own but runs what
// is deferred to it itself. The shared-memory reader (shm/reader_turns.h)
// delivers a frame and then runs, on its own thread, the drain the delivery
// deferred (Executor::defer: "once the current task returns"), as an
// IoPool thread does after a socket read: a request then costs no hand-off
// to another thread. Only while one is installed on the calling thread, and
// only for the executor it stands for.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "crown/common/executor.h"

namespace crown::transport {

class InlineTasks {
 public:
  /// Installs itself on this thread, for `executor`'s deferred tasks.
  explicit InlineTasks(const Executor& executor)
      : executor_(&executor), outer_(std::exchange(current_, this)) {}
  ~InlineTasks() { current_ = outer_; }
  InlineTasks(const InlineTasks&) = delete;
  InlineTasks& operator=(const InlineTasks&) = delete;

  /// The one installed on this thread for `executor`, or null.
  static InlineTasks* on(const Executor& executor) {
    return current_ != nullptr && current_->executor_ == &executor ? current_ : nullptr;
  }

  void push(std::function<void()> task) { tasks_.push_back(std::move(task)); }
  bool empty() const { return tasks_.empty(); }
  /// Runs what was deferred, and what that defers in turn, in order.
  void runAll() {
    while (!tasks_.empty()) {
      std::vector<std::function<void()>> batch;
      batch.swap(tasks_);
      for (auto& task : batch) task();
    }
  }

 private:
  const Executor* executor_;
  InlineTasks* outer_;
  std::vector<std::function<void()>> tasks_;
  static inline thread_local InlineTasks* current_ = nullptr;
};

}  // namespace crown::transport
