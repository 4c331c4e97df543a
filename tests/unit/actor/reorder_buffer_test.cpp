// ORD-1 at the destination: messages held until their predecessors arrive.
#include "actor/reorder_buffer.h"

#include <gtest/gtest.h>

namespace crown::detail {
namespace {

using Buffer = ReorderBuffer<int>;
using Verdict = Buffer::Verdict;
const wire::ActorId kAlice{0, 16};
const wire::ActorId kBob{1, 16};

TEST(ReorderBuffer, InOrderPassesStraightThrough) {
  Buffer buffer;
  std::deque<int> out;
  for (int seq = 1; seq <= 3; ++seq) {
    int item = seq * 10;
    EXPECT_EQ(buffer.accept(kAlice, seq, item, out), Verdict::kInOrder);
  }
  EXPECT_EQ(out, (std::deque<int>{10, 20, 30}));
}

TEST(ReorderBuffer, EarlyMessagesWaitForTheirPredecessors) {
  Buffer buffer;
  std::deque<int> out;
  int three = 3, two = 2, one = 1, bob = 100;
  EXPECT_EQ(buffer.accept(kAlice, 3, three, out), Verdict::kHeldFirst);
  EXPECT_EQ(buffer.accept(kAlice, 2, two, out), Verdict::kHeld);
  EXPECT_EQ(buffer.accept(kBob, 1, bob, out), Verdict::kInOrder);  // senders are independent
  EXPECT_EQ(out, (std::deque<int>{100}));
  EXPECT_EQ(buffer.accept(kAlice, 1, one, out), Verdict::kInOrder);
  EXPECT_EQ(out, (std::deque<int>{100, 1, 2, 3}));
  EXPECT_EQ(buffer.expected(kAlice), 4u);
}

using namespace std::chrono_literals;
constexpr auto kTimeout = 10s;
const Buffer::Clock::time_point kStart{};

TEST(ReorderBuffer, GivingUpSkipsTheGapAndLateMessagesAreRefused) {
  Buffer buffer;
  std::deque<int> out;
  int three = 3, five = 5, one = 1, four = 4;
  EXPECT_EQ(buffer.accept(kAlice, 3, three, out, kStart), Verdict::kHeldFirst);
  EXPECT_EQ(buffer.accept(kAlice, 5, five, out, kStart + 6s), Verdict::kHeld);
  auto early = buffer.giveUp(kAlice, kStart + 5s, kTimeout, out);
  EXPECT_TRUE(out.empty()) << "nothing has waited 10 s yet";
  EXPECT_EQ(early.next, kStart + kTimeout);
  auto first = buffer.giveUp(kAlice, kStart + kTimeout, kTimeout, out);
  EXPECT_EQ(out, (std::deque<int>{3}));
  EXPECT_EQ(first.skipped, 2u);  // 1 and 2
  EXPECT_EQ(first.first, 1u);
  EXPECT_EQ(first.last, 2u);
  EXPECT_EQ(first.next, kStart + 6s + kTimeout) << "5 waits 10 s from its own arrival";
  EXPECT_EQ(buffer.accept(kAlice, 1, one, out), Verdict::kLate);
  EXPECT_EQ(buffer.accept(kAlice, 4, four, out), Verdict::kInOrder);
  EXPECT_EQ(out, (std::deque<int>{3, 4, 5}));
}

// Issue 10: a hop died under a stream of casts, so many runs of numbers
// are missing at once. Before, each run waited its own fresh timeout (6
// gaps: 60 s for a direct call behind them); now they close together.
TEST(ReorderBuffer, ManyGapsOpenedTogetherCloseTogether) {
  Buffer buffer;
  std::deque<int> out;
  for (int seq = 2; seq <= 20; seq += 2) {  // every odd number lost
    int item = seq;
    buffer.accept(kAlice, seq, item, out, kStart + std::chrono::milliseconds(seq));
  }
  int direct = 21;  // a direct call sent after them, arriving at once
  EXPECT_EQ(buffer.accept(kAlice, 21, direct, out, kStart + 30ms), Verdict::kHeld);
  auto result = buffer.giveUp(kAlice, kStart + 30ms + kTimeout, kTimeout, out);
  EXPECT_EQ(result.skipped, 10u);
  EXPECT_FALSE(result.next.has_value());
  EXPECT_EQ(out.size(), 11u);
  EXPECT_EQ(out.back(), 21);
  EXPECT_EQ(buffer.expected(kAlice), 22u);
}

// A timer is armed once per sender while anything is held.
TEST(ReorderBuffer, OneTimerPerSenderWhileHeld) {
  Buffer buffer;
  std::deque<int> out;
  int two = 2, one = 1, four = 4;
  EXPECT_EQ(buffer.accept(kAlice, 2, two, out, kStart), Verdict::kHeldFirst);
  EXPECT_EQ(buffer.accept(kAlice, 1, one, out, kStart), Verdict::kInOrder);
  // The gap closed, but its timer is still pending: no second one.
  EXPECT_EQ(buffer.accept(kAlice, 4, four, out, kStart + 1s), Verdict::kHeld);
  auto result = buffer.giveUp(kAlice, kStart + kTimeout, kTimeout, out);
  EXPECT_EQ(result.next, kStart + 1s + kTimeout);
}

// Issue 10 part 3: a broadcast resent around a lost hop may have come
// through that hop already. ORD-1 delivers it once: a number delivered or
// held is a duplicate, while a number whose gap was given up stays late.
TEST(ReorderBuffer, DuplicatesAreToldFromLateMessages) {
  Buffer buffer;
  std::deque<int> out;
  int one = 1, again = 1, four = 4, fourAgain = 4, two = 2;
  EXPECT_EQ(buffer.accept(kAlice, 1, one, out, kStart), Verdict::kInOrder);
  EXPECT_EQ(buffer.accept(kAlice, 1, again, out, kStart), Verdict::kDuplicate);
  EXPECT_EQ(buffer.accept(kAlice, 4, four, out, kStart), Verdict::kHeldFirst);
  EXPECT_EQ(buffer.accept(kAlice, 4, fourAgain, out, kStart + 1s), Verdict::kDuplicate);
  EXPECT_EQ(fourAgain, 4) << "a refused item is left as it was";
  EXPECT_EQ(out, (std::deque<int>{1}));
  auto result = buffer.giveUp(kAlice, kStart + kTimeout, kTimeout, out);  // 2 and 3 given up
  EXPECT_EQ(result.skipped, 2u);
  EXPECT_EQ(out, (std::deque<int>{1, 4}));
  EXPECT_EQ(buffer.accept(kAlice, 2, two, out), Verdict::kLate);
  EXPECT_EQ(buffer.accept(kAlice, 2, two, out), Verdict::kLate);
  EXPECT_EQ(buffer.accept(kAlice, 4, fourAgain, out), Verdict::kDuplicate);
  EXPECT_EQ(buffer.accept(kAlice, 1, again, out), Verdict::kDuplicate);
  EXPECT_EQ(out, (std::deque<int>{1, 4})) << "nothing delivered twice";
}

// The given-up ranges kept per sender are bounded: after many gaps, the
// oldest are forgotten (a number there reads as a duplicate, dropped).
TEST(ReorderBuffer, GivenUpRangesStayBounded) {
  Buffer buffer;
  std::deque<int> out;
  const std::uint64_t gaps = Buffer::kGivenUpRanges + 8;
  for (std::uint64_t i = 1; i <= gaps; ++i) {
    int item = 0;
    buffer.accept(kAlice, 2 * i, item, out, kStart);  // 2i - 1 missing
    EXPECT_EQ(buffer.giveUp(kAlice, kStart + kTimeout, kTimeout, out).skipped, 1u);
  }
  int item = 0;
  EXPECT_EQ(buffer.accept(kAlice, 2 * gaps - 1, item, out), Verdict::kLate);
  EXPECT_EQ(buffer.accept(kAlice, 1, item, out), Verdict::kDuplicate) << "forgotten";
}

}  // namespace
}  // namespace crown::detail
