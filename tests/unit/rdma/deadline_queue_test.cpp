// DeadlineQueue (src/rdma/deadline_queue.h): the timeouts of RDMA transfers
// behind one pool timer. Entries expire in due order, once; a cancelled one
// never runs and leaves nothing; an earlier entry added later is not kept
// waiting behind a later one's timer.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "crown/transport/io_pool.h"
#include "rdma/deadline_queue.h"

namespace crown::rdma::detail {
namespace {

using namespace std::chrono_literals;

class DeadlineQueueTest : public ::testing::Test {
 protected:
  void SetUp() override { pool_->start(); }
  void TearDown() override { pool_->stop(); }

  // Records `name` when it expires.
  std::function<void()> record(int name) {
    return [this, name] {
      std::lock_guard lock(mutex_);
      fired_.push_back(name);
      changed_.notify_all();
    };
  }
  bool waitFor(std::size_t count, std::chrono::milliseconds within) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, within, [&] { return fired_.size() >= count; });
  }

  std::shared_ptr<transport::IoPool> pool_ = std::make_shared<transport::IoPool>();
  std::shared_ptr<DeadlineQueue> queue_ = std::make_shared<DeadlineQueue>(pool_);
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> fired_;
};

TEST_F(DeadlineQueueTest, EntriesExpireInDueOrderOnce) {
  queue_->add(60ms, record(3));
  queue_->add(20ms, record(1));
  queue_->add(40ms, record(2));
  ASSERT_TRUE(waitFor(3, 5s));
  std::this_thread::sleep_for(50ms);  // nothing fires twice
  std::lock_guard lock(mutex_);
  EXPECT_EQ(fired_, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(queue_->size(), 0u);
}

TEST_F(DeadlineQueueTest, ACancelledEntryNeverRunsAndLeavesNothing) {
  auto early = queue_->add(10ms, record(1));
  queue_->add(40ms, record(2));
  queue_->cancel(early);
  EXPECT_EQ(queue_->size(), 1u);
  ASSERT_TRUE(waitFor(1, 5s));
  std::this_thread::sleep_for(30ms);
  std::lock_guard lock(mutex_);
  EXPECT_EQ(fired_, (std::vector<int>{2}));
  queue_->cancel(early);  // again, and after expiry: no-ops
  EXPECT_EQ(queue_->size(), 0u);
}

TEST_F(DeadlineQueueTest, AnEarlierEntryAddedLaterIsNotHeldBehindALaterTimer) {
  queue_->add(60s, record(2));
  auto start = std::chrono::steady_clock::now();
  queue_->add(20ms, record(1));
  ASSERT_TRUE(waitFor(1, 5s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  std::lock_guard lock(mutex_);
  EXPECT_EQ(fired_, (std::vector<int>{1}));
}

TEST_F(DeadlineQueueTest, ManyCancelledEntriesLeaveNoneBehind) {
  for (int i = 0; i < 100000; ++i) queue_->cancel(queue_->add(60s, record(i)));
  EXPECT_EQ(queue_->size(), 0u);
}

}  // namespace
}  // namespace crown::rdma::detail
