// IoPool: the threads of a process that run both its sockets and its
// actors (one Boost.Asio io_context; every link runs on its own strand, so
// any number of threads may run it).
//
// In the steady state one thread runs everything: it reads a frame and runs
// the actor's handler right there (defer()), so a request costs no hand-off
// between threads, and no other thread is woken. More threads join only
// when needed, and park again when they are not:
//   - a task about to block (Future::get() in a handler) hands the sockets
//     to another thread first, so the reply it waits for is still read and
//     nothing deadlocks;
//   - a task that runs longer than CROWN_INLINE_BUDGET_US (default 2000) is
//     given company, so other actors and the links do not wait behind it.
// Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

namespace crown::transport {

class IoPool {
 public:
  IoPool();
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  /// Starts the first thread.
  void start();
  /// Runs `task` on whichever pool thread is free.
  void post(std::function<void()> task);
  /// Runs `task` on this pool thread once its current task returns (from
  /// elsewhere: as post). For a current task that does not block after it:
  /// the deferred task waits for it.
  void defer(std::function<void()> task);
  /// Runs `task` on a pool thread once `delay` has passed (not at all if the
  /// pool stops first).
  void after(std::chrono::milliseconds delay, std::function<void()> task);
  /// Stops the io_context and joins the threads (not from a pool thread).
  void stop();
  /// True on a thread of this pool.
  bool inPool() const;
  /// Threads running the io_context now (not parked, not blocked).
  int runningThreads() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace crown::transport
