#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "crown/actor/future.h"
#include "crown/transport/io_pool.h"
#include "transport/inline_tasks.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

TEST(IoPool, RunsPostedTasks) {
  IoPool pool;
  pool.start();
  std::promise<bool> ran;
  pool.post([&] { ran.set_value(pool.inPool()); });
  auto result = ran.get_future();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(result.get());
  EXPECT_FALSE(pool.inPool());
}

// A thread that runs the pool's deferred tasks itself (a shared-memory
// link's reader) counts as the pool's: what it defers runs on it, after
// the current work, in order, and nothing goes to the pool's threads.
TEST(IoPool, AThreadThatRunsDeferredTasksItselfRunsThemInOrder) {
  IoPool pool;
  pool.start();
  std::vector<int> order;
  {
    InlineTasks deferred(pool);
    EXPECT_TRUE(pool.inPool());
    pool.defer([&] {
      order.push_back(1);
      pool.defer([&] { order.push_back(3); });  // deferred by a deferred task: after the rest
    });
    pool.defer([&] { order.push_back(2); });
    EXPECT_TRUE(order.empty());  // nothing ran yet: it waits for the current work
    deferred.runAll();
  }
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(pool.inPool());  // uninstalled with its scope
  IoPool other;
  InlineTasks forOther(other);
  EXPECT_FALSE(pool.inPool());  // installed for another executor only
}

TEST(IoPool, ABlockedTaskDoesNotStarveTheTaskItWaitsFor) {
  IoPool pool;
  pool.start();
  auto state = std::make_shared<detail::FutureState<int>>();
  std::promise<int> outcome;
  pool.post([&, state] {
    // Waits for a task queued behind it: only another thread can run that.
    pool.post([state] { state->setValue(7); });
    outcome.set_value(Future<int>(state).get(5s));
  });
  auto result = outcome.get_future();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(result.get(), 7);
}

TEST(IoPool, ALongTaskGetsCompany) {
  IoPool pool;
  pool.start();
  std::atomic<bool> release{false};
  pool.post([&] {
    while (!release) std::this_thread::sleep_for(1ms);  // busy for as long as the test wants
  });
  std::this_thread::sleep_for(10ms);
  std::promise<void> other;
  auto start = std::chrono::steady_clock::now();
  pool.post([&] { other.set_value(); });
  auto done = other.get_future();
  EXPECT_EQ(done.wait_for(2s), std::future_status::ready);  // well before the long task ends
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  release = true;
}

TEST(IoPool, ExtraThreadsParkWhenTheRushIsOver) {
  IoPool pool;
  pool.start();
  std::atomic<int> running{0};
  std::atomic<bool> release{false};
  for (int i = 0; i < 3; ++i) {
    pool.post([&] {
      ++running;
      while (!release) std::this_thread::sleep_for(1ms);
    });
  }
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (running < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(running, 3);  // three long tasks ran side by side
  release = true;
  deadline = std::chrono::steady_clock::now() + 5s;
  while (pool.runningThreads() > 1 && std::chrono::steady_clock::now() < deadline) {
    pool.post([] {});  // wake threads so they see they are surplus
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(pool.runningThreads(), 1);
}

// A pool stopped and dropped by one of its own tasks: that thread returns
// into the pool's run loop afterwards, so the loop's state must outlive the
// pool object (tests/CMakeLists.txt runs this one under valgrind too, where
// a use after free fails it).
TEST(IoPool, StoppedAndDroppedFromItsOwnThread) {
  auto pool = std::make_shared<IoPool>();
  pool->start();
  std::promise<void> done;
  std::weak_ptr<IoPool> watch = pool;
  pool->post([&pool, &done] {
    pool->stop();
    pool.reset();  // the last owner: ~IoPool runs on this pool thread
    done.set_value();
  });
  ASSERT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(watch.expired());
  std::this_thread::sleep_for(200ms);  // the detached thread leaves its loop
}

}  // namespace
}  // namespace crown::transport
