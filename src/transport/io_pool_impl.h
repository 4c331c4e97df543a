// IoPool's insides; the Asio backends reach its io_context through
// IoPoolAccess, nothing else does.
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include "crown/transport/io_pool.h"

namespace crown::transport {

struct IoPool::Impl {
  using Clock = std::chrono::steady_clock;

  // One pool thread's state, guarded by mutex.
  struct Worker {
    std::thread thread;
    bool running = false;           // in the run loop (else parked)
    bool blocked = false;           // inside a BlockingScope
    Clock::time_point busySince{};  // in a pool task since then; epoch: not in one
    bool exited = false;            // workerMain has returned: join() will not wait
  };

  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::chrono::microseconds budget{2000};

  mutable std::mutex mutex;
  std::condition_variable parked;  // parked workers wait here until addRunner picks them
  std::condition_variable monitorCv;
  std::condition_variable exitedCv;  // a worker has left workerMain
  std::list<Worker> workers;  // stable addresses
  bool stopped = false;
  std::optional<std::chrono::milliseconds> stopBound;  // setStopBound's, else the setting
  std::thread monitor;
  bool monitorAsleep = false;  // waiting for the first task after an idle spell
  std::uint64_t tasksStarted = 0;

  // All with mutex held.
  int available() const;  // running, not blocked, not in a task
  void addRunner();       // wake a parked worker or start a new one
  void workerMain(Worker& self);
  void monitorMain();
  void runTask(Worker& self, const std::function<void()>& task);
  void enterBlocking(Worker& self);
  void leaveBlocking(Worker& self);
  std::weak_ptr<Impl> self;  // for the threads' keep-alive
};

struct IoPoolAccess {
  static boost::asio::io_context& io(IoPool& pool) { return pool.impl_->io; }
};

}  // namespace crown::transport
