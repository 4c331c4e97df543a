// The request table's view of ranks: present from the launch, lost, or a
// vacant slot that a replacement joins later (Proc::admitRank).
#include "actor/request_table.h"

#include <gtest/gtest.h>

namespace crown::detail {
namespace {

Completion counting(int& calls) {
  return [&calls](Outcome&&) { ++calls; };
}

TEST(RequestTable, SpareSlotsAreVacantUntilARankJoins) {
  RequestTable table(/*slots=*/6, /*present=*/4, /*self=*/1);
  EXPECT_TRUE(table.alive(3));
  EXPECT_FALSE(table.alive(4));
  EXPECT_FALSE(table.exists(4));
  int calls = 0;
  EXPECT_FALSE(table.add(table.nextId(), 4, counting(calls)));  // nobody to wait on
  EXPECT_TRUE(table.admit(4));
  EXPECT_TRUE(table.alive(4));
  EXPECT_TRUE(table.exists(4));
  EXPECT_FALSE(table.admit(4));  // taken
  EXPECT_FALSE(table.admit(2));  // launched
  auto id = table.nextId();
  EXPECT_TRUE(table.add(id, 4, counting(calls)));
  EXPECT_EQ(table.markLost(4).size(), 1u);  // the joined rank's requests fail with it
  EXPECT_FALSE(table.alive(4));
  EXPECT_TRUE(table.exists(4));
  EXPECT_FALSE(table.admit(4));  // a lost rank's slot is never reused
  EXPECT_EQ(calls, 0);
}

TEST(RequestTable, AReplacementIsPresentInItsOwnTable) {
  RequestTable table(/*slots=*/8, /*present=*/4, /*self=*/5);
  EXPECT_TRUE(table.alive(5));
  EXPECT_FALSE(table.alive(4));
  EXPECT_TRUE(table.alive(0));
}

}  // namespace
}  // namespace crown::detail
