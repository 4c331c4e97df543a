// Executor: the threads that run a process's work (its links' reads and
// writes, its actors' handlers, timers), as the layers above the transport
// see them: post, defer, after. The transport's IoPool is the one in use
// (transport/io_pool.h); the actor layer and the modules depend only on
// this interface. Thread-safe.
#pragma once

#include <chrono>
#include <functional>

namespace crown {

class Executor {
 public:
  virtual ~Executor() = default;

  /// Starts running tasks (idempotent).
  virtual void start() = 0;
  /// Runs `task` on whichever thread is free.
  virtual void post(std::function<void()> task) = 0;
  /// Runs `task` on this executor thread once its current task returns
  /// (from elsewhere: as post; from a thread that runs this executor's
  /// deferred tasks itself, there: transport/inline_tasks.h). For a current
  /// task that does not block after it: the deferred task waits for it.
  virtual void defer(std::function<void()> task) = 0;
  /// Runs `task` once `delay` has passed (not at all if the executor stops first).
  virtual void after(std::chrono::milliseconds delay, std::function<void()> task) = 0;
  /// Stops running tasks and ends the threads; from one of its own threads
  /// too, which then ends once its current task returns.
  virtual void stop() = 0;
  /// True on one of this executor's threads, or on a thread that runs its
  /// deferred tasks itself (transport/inline_tasks.h): where defer() runs
  /// the task on this very thread once the current one returns.
  virtual bool inPool() const = 0;
};

}  // namespace crown
