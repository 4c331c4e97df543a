#include "transport/io_pool_impl.h"

#include "transport/inline_tasks.h"

#include "crown/common/blocking.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown::transport {
namespace {

struct ThreadState {
  IoPool::Impl* pool = nullptr;
  IoPool::Impl::Worker* worker = nullptr;
};
thread_local ThreadState t_state;

constexpr int kMaxThreads = 1024;

}  // namespace

IoPool::IoPool() : impl_(std::make_shared<Impl>()) {
  impl_->self = impl_;
  impl_->budget =
      std::chrono::microseconds(env::integer("CROWN_INLINE_BUDGET_US", 2000, 100, 60000000));
}

IoPool::~IoPool() { stop(); }

void IoPool::start() {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->workers.empty() || impl_->stopped) return;
  impl_->addRunner();
  impl_->monitor = std::thread([impl = impl_] { impl->monitorMain(); });
}

namespace {
// Every task posted through the pool counts as busy time of its thread.
std::function<void()> asTask(IoPool::Impl& pool, std::function<void()> task) {
  return [&pool, task = std::move(task)] {
    if (t_state.pool == &pool) {
      pool.runTask(*t_state.worker, task);
    } else {
      task();
    }
  };
}
}  // namespace

void IoPool::post(std::function<void()> task) {
  boost::asio::post(impl_->io, asTask(*impl_, std::move(task)));
}

void IoPool::defer(std::function<void()> task) {
  if (InlineTasks* here = InlineTasks::on(*this)) return here->push(std::move(task));
  boost::asio::defer(impl_->io, asTask(*impl_, std::move(task)));
}

void IoPool::after(std::chrono::milliseconds delay, std::function<void()> task) {
  auto timer = std::make_shared<boost::asio::steady_timer>(impl_->io, delay);
  timer->async_wait(
      [timer, task = asTask(*impl_, std::move(task))](const boost::system::error_code& error) {
        if (!error) task();
      });
}

void IoPool::setStopBound(std::chrono::milliseconds bound) {
  std::lock_guard lock(impl_->mutex);
  impl_->stopBound = bound;
}

void IoPool::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  impl_->parked.notify_all();
  impl_->monitorCv.notify_all();
  impl_->work.reset();
  impl_->io.stop();
  if (impl_->monitor.joinable()) impl_->monitor.join();
  // SHT-1: a task that never returns (an endpoint stuck in user code) must
  // not hold the process: past the bound, its thread is left to run on, and
  // the shared state it holds lives until it returns, if ever.
  std::chrono::milliseconds bound;
  {
    std::lock_guard lock(impl_->mutex);
    bound = impl_->stopBound.value_or(
        env::millis("CROWN_FLUSH_TIMEOUT_MS", std::chrono::seconds(5)));
  }
  auto deadline = std::chrono::steady_clock::now() + bound;
  std::size_t leftBehind = 0;
  for (auto& worker : impl_->workers) {
    if (worker.thread.get_id() == std::this_thread::get_id()) {
      // Stopping from inside the pool: this thread returns on its own.
      worker.thread.detach();
      continue;
    }
    if (!worker.thread.joinable()) continue;
    std::unique_lock lock(impl_->mutex);
    if (impl_->exitedCv.wait_until(lock, deadline, [&worker] { return worker.exited; })) {
      lock.unlock();
      worker.thread.join();
    } else {
      worker.thread.detach();
      ++leftBehind;
    }
  }
  if (leftBehind > 0) {
    log::get().warn(
        "{} pool thread{} still in a task at shutdown (a handler that never "
        "returns?): left to run while the process exits",
        leftBehind, leftBehind == 1 ? " is" : "s are");
  }
}

bool IoPool::inPool() const {
  return t_state.pool == impl_.get() || InlineTasks::on(*this) != nullptr;
}

int IoPool::runningThreads() const {
  std::lock_guard lock(impl_->mutex);
  int running = 0;
  for (const auto& worker : impl_->workers) running += worker.running && !worker.blocked;
  return running;
}

int IoPool::Impl::available() const {
  int count = 0;
  for (const auto& worker : workers) {
    count += worker.running && !worker.blocked && worker.busySince == Clock::time_point{};
  }
  return count;
}

void IoPool::Impl::addRunner() {
  for (auto& worker : workers) {
    if (!worker.running) {  // parked: put it back to work
      worker.running = true;
      parked.notify_all();
      return;
    }
  }
  if (static_cast<int>(workers.size()) >= kMaxThreads) {
    log::get().error("io pool at {} threads: every one is blocked or busy", kMaxThreads);
    return;
  }
  Worker& worker = workers.emplace_back();
  worker.running = true;
  worker.thread =
      std::thread([keepAlive = self.lock(), &worker] { keepAlive->workerMain(worker); });
}

void IoPool::Impl::workerMain(Worker& self) {
  t_state = {this, &self};
  detail::BlockingHooks hooks{[](void*) { t_state.pool->enterBlocking(*t_state.worker); },
                              [](void*) { t_state.pool->leaveBlocking(*t_state.worker); }, nullptr};
  detail::setBlockingHooks(&hooks);
  std::unique_lock lock(mutex);
  while (!stopped) {
    parked.wait(lock, [this, &self] { return stopped || self.running; });
    if (stopped) break;
    lock.unlock();
    io.run_one();
    lock.lock();
    // One free thread keeps the links; the others park until needed.
    if (available() > 1) self.running = false;
  }
  self.running = false;
  self.exited = true;
  exitedCv.notify_all();
  detail::setBlockingHooks(nullptr);
}

void IoPool::Impl::runTask(Worker& self, const std::function<void()>& task) {
  {
    std::lock_guard lock(mutex);
    self.busySince = Clock::now();
    ++tasksStarted;
    if (monitorAsleep) {  // only the first task after an idle spell wakes the monitor
      monitorAsleep = false;
      monitorCv.notify_one();
    }
  }
  task();
  std::lock_guard lock(mutex);
  self.busySince = {};
}

void IoPool::Impl::enterBlocking(Worker& self) {
  std::lock_guard lock(mutex);
  self.blocked = true;
  if (!stopped && available() == 0) addRunner();  // someone must read the reply we wait for
}

void IoPool::Impl::leaveBlocking(Worker& self) {
  std::lock_guard lock(mutex);
  self.blocked = false;
}

// Gives a long-running task company: when no thread is free and the oldest
// task has run past the budget, another thread takes over the links. While
// tasks keep coming it looks every budget period; after a period without
// any it sleeps until the next task starts.
void IoPool::Impl::monitorMain() {
  std::unique_lock lock(mutex);
  std::uint64_t seen = tasksStarted;
  while (!stopped) {
    Clock::time_point oldest = Clock::time_point::max();
    for (const auto& worker : workers) {
      if (worker.running && !worker.blocked && worker.busySince != Clock::time_point{}) {
        oldest = std::min(oldest, worker.busySince);
      }
    }
    if (available() == 0 && oldest != Clock::time_point::max() && Clock::now() - oldest >= budget) {
      addRunner();
    } else if (oldest == Clock::time_point::max() && seen == tasksStarted) {
      monitorAsleep = true;
      monitorCv.wait(lock, [this] { return stopped || !monitorAsleep; });
    }
    seen = tasksStarted;
    monitorCv.wait_for(lock, budget);
  }
}

}  // namespace crown::transport
