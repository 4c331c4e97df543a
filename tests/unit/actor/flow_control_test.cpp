// FLO-1's backpressure: FlowControl's windows alone, then a Proc whose
// sender floods a slow actor.
#include "actor/flow_control.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <thread>

#include "crown/actor/spawn.h"

namespace crown {
namespace {

using namespace std::chrono_literals;
using detail::Credit;
using detail::FlowControl;
using detail::FlowLimits;

const wire::ActorId kSender{0, 20};
const wire::ActorId kDest{1, 30};

struct Flow {
  explicit Flow(FlowLimits limits)
      : flow(
            limits, [this](const Credit& c) { credits.push_back(c); },
            [this](const detail::CreditRequest&) { ++asked; },
            [this](Rank) { return destAlive.load(); }) {}
  std::vector<Credit> credits;
  std::atomic<int> asked{0};
  std::atomic<bool> destAlive{true};
  FlowControl flow;
};

// True if waitForRoom(bytes) is still waiting after a while.
bool stillWaits(std::future<void>& waiting) { return waiting.wait_for(100ms) == std::future_status::timeout; }

TEST(FlowControl, AFullWindowWaitsUntilTheReceiverCreditsIt) {
  Flow f({4, 1 << 20});
  for (std::uint64_t seq = 1; seq <= 4; ++seq) {
    f.flow.waitForRoom(kSender, kDest, 10);  // room: returns at once
    f.flow.sent(kSender, kDest, seq, 10);
  }
  auto waiting = std::async(std::launch::async, [&] { f.flow.waitForRoom(kSender, kDest, 10); });
  EXPECT_TRUE(stillWaits(waiting));
  f.flow.credited({kSender, kDest, 1, 10});
  EXPECT_EQ(waiting.wait_for(5s), std::future_status::ready);
}

// A window drained to nothing is dropped; the next message to that actor
// starts a new one that counts only itself in flight, however many were
// sent before (it used to count them all, and every later send waited).
TEST(FlowControl, AWindowDrainedAndStartedAgainCountsOnlyWhatIsInFlight) {
  Flow f({4, 1 << 20});
  std::uint64_t seq = 0;
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 3; ++i) {
      auto sent = std::async(std::launch::async, [&] { f.flow.waitForRoom(kSender, kDest, 10); });
      ASSERT_EQ(sent.wait_for(5s), std::future_status::ready) << "round " << round;
      f.flow.sent(kSender, kDest, ++seq, 10);
    }
    f.flow.credited({kSender, kDest, seq, 30});  // all handled: the window goes
  }
  EXPECT_EQ(f.asked.load(), 0);  // never full, never asked for credit
}

// A credit that lands while a waiting sender has the lock released (asking
// for credit) frees it at once, not at its next poll a second later.
TEST(FlowControl, ACreditArrivingWhileTheSenderAsksIsNotMissed) {
  std::unique_ptr<FlowControl> flow;
  flow = std::make_unique<FlowControl>(
      FlowLimits{2, 1 << 20}, [](const Credit&) {},
      [&](const detail::CreditRequest&) { flow->credited({kSender, kDest, 2, 20}); },
      [](Rank) { return true; });
  flow->sent(kSender, kDest, 1, 10);
  flow->sent(kSender, kDest, 2, 10);
  auto start = std::chrono::steady_clock::now();
  flow->waitForRoom(kSender, kDest, 10);  // full; asking credits it at once
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
}

TEST(FlowControl, TheByteBoundCountsAndALoneLargeMessageAlwaysGoes) {
  Flow f({100, 1000});
  f.flow.waitForRoom(kSender, kDest, 5000);  // nothing in flight: any size goes
  f.flow.sent(kSender, kDest, 1, 600);
  auto waiting = std::async(std::launch::async, [&] { f.flow.waitForRoom(kSender, kDest, 600); });
  EXPECT_TRUE(stillWaits(waiting));  // 600 + 600 > 1000
  f.flow.credited({kSender, kDest, 1, 600});
  EXPECT_EQ(waiting.wait_for(5s), std::future_status::ready);
}

// A message needing more room than the quarter credits have freed must not
// wait for a credit that is not due: the waiting sender asks, and the
// receiver credits what it has handled at once, and again after the next.
TEST(FlowControl, AWaitingSenderAsksAndIsCreditedAtOnceAndAfterTheNextHandled) {
  Flow sender({100, 1000});
  sender.flow.sent(kSender, kDest, 1, 10);
  auto waiting = std::async(std::launch::async, [&] { sender.flow.waitForRoom(kSender, kDest, 995); });
  EXPECT_TRUE(stillWaits(waiting));
  EXPECT_EQ(sender.asked.load(), 1);

  Flow receiver({100, 1000});
  receiver.flow.handled(kSender, kDest, 1, 10);  // far below a quarter: no credit due
  EXPECT_TRUE(receiver.credits.empty());
  receiver.flow.requested({kSender, kDest});
  ASSERT_EQ(receiver.credits.size(), 1u);  // at once: seq 1 was handled
  EXPECT_EQ(receiver.credits[0].handledThrough, 1u);
  receiver.flow.requested({kSender, kDest});  // nothing new handled: owed, not sent
  EXPECT_EQ(receiver.credits.size(), 1u);
  receiver.flow.handled(kSender, kDest, 2, 10);
  EXPECT_EQ(receiver.credits.size(), 2u);  // the owed credit, after the next handled

  sender.flow.credited(receiver.credits[0]);
  EXPECT_EQ(waiting.wait_for(5s), std::future_status::ready);
}

TEST(FlowControl, TheReceiverCreditsEachQuarterWindowAndBytes) {
  Flow f({8, 1000});
  for (std::uint64_t seq = 1; seq <= 8; ++seq) f.flow.handled(kSender, kDest, seq, 1);
  ASSERT_EQ(f.credits.size(), 4u);  // a quarter of 8 messages: one credit per 2
  EXPECT_EQ(f.credits.back().handledThrough, 8u);
  EXPECT_EQ(f.credits.back().bytes, 2u);  // since the credit before
  EXPECT_EQ(f.credits.back().sender, kSender);
  f.flow.handled(kSender, kDest, 9, 300);  // a quarter of the bytes
  ASSERT_EQ(f.credits.size(), 5u);
  EXPECT_EQ(f.credits.back().handledThrough, 9u);
}

// A seq given up as lost (an ORD-1 gap) is never handled: the next handled
// seq passes it, and its credit frees it with the rest.
TEST(FlowControl, ALostMessageIsFreedByTheNextCredit) {
  Flow f({4, 1 << 20});
  for (std::uint64_t seq = 1; seq <= 4; ++seq) f.flow.sent(kSender, kDest, seq, 10);
  f.flow.credited({kSender, kDest, 4, 30});  // seq 2 never arrived: 3 handled
  auto waiting = std::async(std::launch::async, [&] { f.flow.waitForRoom(kSender, kDest, 10); });
  EXPECT_EQ(waiting.wait_for(5s), std::future_status::ready);
}

TEST(FlowControl, ALostReceiverReleasesItsWaitersAndIsForgotten) {
  Flow f({2, 1 << 20});
  f.flow.sent(kSender, kDest, 1, 10);
  f.flow.sent(kSender, kDest, 2, 10);
  auto waiting = std::async(std::launch::async, [&] { f.flow.waitForRoom(kSender, kDest, 10); });
  EXPECT_TRUE(stillWaits(waiting));
  f.destAlive = false;
  f.flow.peerLost(kDest.rank);
  EXPECT_EQ(waiting.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.flow.entries(), 0u);
}

struct Work {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Backlog {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

std::atomic<int> g_sent{0};  // by the flooding test, before each send

// Handles a message per millisecond and records the most that were ever
// sent to it and not yet handled.
class Slow : public Actor {
 public:
  Slow() {
    handle<Work>([this](const Work&) {
      ++handled_;
      maxBacklog_ = std::max(maxBacklog_, g_sent.load() - handled_);
      std::this_thread::sleep_for(1ms);
    });
    handle<Backlog>([this](const Backlog&) { return std::vector<int>{handled_, maxBacklog_}; });
  }

 private:
  int handled_ = 0;
  int maxBacklog_ = 0;
};

// Issue 10, part 5: before flow control, a sender flooding a slow actor
// grew its mailbox without bound (a backlog of all 600 here).
TEST(FlowControl, ASenderFloodingASlowActorWaitsAtTheMailboxLimit) {
  ::setenv("CROWN_MAILBOX_LIMIT_MESSAGES", "40", 1);
  transport::AsioOptions options;
  options.bindAddress = "127.0.0.1";
  options.secret = transport::randomSecret();
  options.pool = std::make_shared<transport::IoPool>();
  auto fabric = transport::makeAsioTransport(options);
  auto self = fabric->address();
  auto proc = std::make_unique<Proc>(
      Proc::Options{0, 1, std::make_shared<const std::vector<std::string>>(1, "localhost"),
                    options.pool},
      std::move(fabric), std::vector<std::string>{self});
  ::unsetenv("CROWN_MAILBOX_LIMIT_MESSAGES");
  auto slow = spawnOn<Slow>(0, "slow").get(10s);
  constexpr int kMessages = 600;
  for (int i = 0; i < kMessages; ++i) {
    ++g_sent;
    slow.send(Work{});
  }
  auto counts = slow.call<std::vector<int>>(Backlog{}).get(30s);
  EXPECT_EQ(counts[0], kMessages);
  EXPECT_LE(counts[1], 40 + 1) << "the mailbox grew past its limit";
  EXPECT_GE(counts[1], 10) << "the sender was held back more than the limit asks";
}

}  // namespace
}  // namespace crown
