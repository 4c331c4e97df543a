// Who reads a shared-memory link (reader_turns.h, relief_watch.h): the
// reader runs a frame's handler itself; a handler about to block hands the
// reading to another thread at once, so the frame it waits for is still
// read (without that, a handler that waits for a reply on its own link
// waits forever); a handler that runs past the budget is relieved by the
// watch; a relieved thread is reused as a spare; stop ends every thread, and
// leaves one stuck in a handler to end on its own, within its bound.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <set>

#include "crown/common/blocking.h"
#include "transport/shm/reader_turns.h"
#include "transport/shm/relief_watch.h"

namespace crown::transport::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A link's stand-in: "frames" are handlers queued here; its reader's body
// takes them one at a time and runs each inline, as InLink::read does.
class FakeLink {
 public:
  explicit FakeLink(ReliefWatch* watch = nullptr) {
    turns_ = ReaderTurns::make([this] { return body(); },
                               [watch] {
                                 if (watch) watch->busy();
                               });
    if (watch) watch->watch(turns_);
    turns_->run();
  }
  ~FakeLink() { close(); }

  void send(std::function<void()> handler) {
    std::lock_guard lock(mutex_);
    frames_.push_back(std::move(handler));
    cv_.notify_all();
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      cv_.notify_all();
    }
    turns_->stop(5s);
  }
  ReaderTurns& turns() { return *turns_; }
  int readersSeen() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(readers_.size());
  }

 private:
  bool body() {
    for (;;) {
      std::function<void()> handler;
      {
        std::unique_lock lock(mutex_);
        readers_.insert(std::this_thread::get_id());
        cv_.wait(lock, [this] { return closed_ || !frames_.empty(); });
        if (frames_.empty()) return true;  // closed: the link ended
        handler = std::move(frames_.front());
        frames_.pop_front();
      }
      turns_->beginInline();
      handler();
      if (!turns_->endInline()) return false;
    }
  }

  std::shared_ptr<ReaderTurns> turns_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> frames_;
  std::set<std::thread::id> readers_;
  bool closed_ = false;
};

TEST(ShmReaderTurns, AHandlerRunsOnTheReaderItself) {
  FakeLink link;
  std::promise<std::thread::id> ran;
  link.send([&] { ran.set_value(std::this_thread::get_id()); });
  auto future = ran.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(link.turns().threads(), 1u);  // nothing was handed off
  EXPECT_EQ(link.readersSeen(), 1);
}

TEST(ShmReaderTurns, AHandlerAboutToBlockHandsTheReadingOnSoItsReplyIsRead) {
  FakeLink link;
  std::promise<void> reply;
  auto replied = reply.get_future();
  std::promise<bool> outcome;
  link.send([&] {
    detail::BlockingScope blocking;  // as Future::get() marks its wait
    outcome.set_value(replied.wait_for(10s) == std::future_status::ready);
  });
  link.send([&] { reply.set_value(); });  // on the same link, behind the blocked handler
  auto result = outcome.get_future();
  ASSERT_EQ(result.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(result.get());
  EXPECT_EQ(link.turns().threads(), 2u);
}

TEST(ShmReaderTurns, ARelievedThreadIsTheNextSpare) {
  FakeLink link;
  for (int i = 0; i < 5; ++i) {
    std::promise<void> reply;
    auto replied = reply.get_future();
    std::promise<void> done;
    link.send([&] {
      detail::BlockingScope blocking;
      replied.wait();
      done.set_value();
    });
    link.send([&] { reply.set_value(); });
    ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
    auto deadline = Clock::now() + 10s;  // the relieved thread parks once its handler returned
    while (link.turns().spares() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(link.turns().spares(), 1);
  }
  // Each relief took the spare the last one left: two threads in all.
  EXPECT_EQ(link.turns().threads(), 2u);
}

TEST(ShmReaderTurns, TheWatchRelievesAHandlerPastItsBudget) {
  ReliefWatch watch(2ms);
  FakeLink link(&watch);
  std::atomic<bool> release{false};
  std::promise<void> started;
  link.send([&] {
    started.set_value();
    while (!release) std::this_thread::sleep_for(1ms);  // busy, never marked as blocking
  });
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  std::promise<Clock::time_point> second;
  auto sent = Clock::now();
  link.send([&] { second.set_value(Clock::now()); });
  auto ran = second.get_future();
  ASSERT_EQ(ran.wait_for(10s), std::future_status::ready) << "the long handler was never relieved";
  EXPECT_LT(ran.get() - sent, 2s);
  release = true;
  EXPECT_EQ(link.turns().threads(), 2u);
}

TEST(ShmReaderTurns, AHandlerWithinItsBudgetIsNotRelieved) {
  ReliefWatch watch(500ms);
  FakeLink link(&watch);
  for (int i = 0; i < 20; ++i) {
    std::promise<void> done;
    link.send([&] {
      std::this_thread::sleep_for(1ms);
      done.set_value();
    });
    ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
  }
  EXPECT_EQ(link.turns().threads(), 1u);
}

TEST(ShmReaderTurns, StopLeavesAStuckHandlerBehindWithinItsBound) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto ended = std::make_shared<std::atomic<bool>>(false);
  auto turns = ReaderTurns::make([release, ended, first = true]() mutable {
    if (!first) return true;
    first = false;
    while (!*release) std::this_thread::sleep_for(1ms);  // a handler that does not return
    *ended = true;
    return false;
  });
  turns->run();
  std::this_thread::sleep_for(20ms);
  auto before = Clock::now();
  turns->stop(200ms);
  EXPECT_LT(Clock::now() - before, 5s);
  EXPECT_FALSE(*ended);
  *release = true;
  for (int i = 0; i < 1000 && !*ended; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(*ended);
}

}  // namespace
}  // namespace crown::transport::shm
