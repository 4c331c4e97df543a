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

#include "crown/common/executor.h"

namespace crown::transport {

class IoPool final : public Executor {
 public:
  IoPool();
  ~IoPool() override;
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  /// Starts the first thread.
  void start() override;
  void post(std::function<void()> task) override;
  void defer(std::function<void()> task) override;
  void after(std::chrono::milliseconds delay, std::function<void()> task) override;
  /// Stops the io_context and joins the threads; a pool thread that calls it
  /// ends once its task returns (it keeps the pool's state alive till then).
  /// A thread still in a task after CROWN_FLUSH_TIMEOUT_MS (a handler that
  /// never returns) is left to run on, likewise, and logged (SHT-1).
  void stop() override;
  /// The bound stop() gives a thread still in a task, instead of
  /// CROWN_FLUSH_TIMEOUT_MS (a failed job's shutdown waits less: Runtime::finish).
  void setStopBound(std::chrono::milliseconds bound);
  bool inPool() const override;
  /// Threads running the io_context now (not parked, not blocked).
  int runningThreads() const;

  struct Impl;

 private:
  friend struct IoPoolAccess;  // the transport's Asio backends (io_pool_impl.h)
  std::shared_ptr<Impl> impl_;  // shared with its threads, which may outlive a stop from inside
};

}  // namespace crown::transport
