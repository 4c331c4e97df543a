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

TEST(ReorderBuffer, GivingUpSkipsTheGapAndLateMessagesAreRefused) {
  Buffer buffer;
  std::deque<int> out;
  int three = 3, five = 5, one = 1, four = 4;
  buffer.accept(kAlice, 3, three, out);
  buffer.accept(kAlice, 5, five, out);
  EXPECT_TRUE(buffer.giveUp(kAlice, /*stuckAt=*/2, out)) << "not stuck there: still held";
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(buffer.giveUp(kAlice, 1, out)) << "5 is still held behind 4";
  EXPECT_EQ(out, (std::deque<int>{3}));
  EXPECT_EQ(buffer.accept(kAlice, 1, one, out), Verdict::kLate);
  EXPECT_EQ(buffer.accept(kAlice, 4, four, out), Verdict::kInOrder);
  EXPECT_EQ(out, (std::deque<int>{3, 4, 5}));
}

}  // namespace
}  // namespace crown::detail
