// Aggregation at one hop, driven part by part: a subtree's partial value
// that cannot be folded fails the members whose replies it holds, not
// rank 0 (which may not even be in the cast); a leaf's answer made at once
// (alone) is what an aggregation of its one member gives. Reducer families: a key no
// registration names is resolved by the family of its prefix.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "crown/actor/failure.h"
#include "mesh/aggregation.h"

namespace crown::mesh {
namespace {

const bool kRefuseRegistered = (detail::registerReducer(
                                    "test::Refuse<int>",
                                    {wire::messageName<int>(),
                                     [](const wire::Bytes&, const wire::Bytes&) -> wire::Bytes {
                                       throw std::runtime_error("these values do not combine");
                                     }}),
                                true);

CastEntry okEntry(std::uint64_t rank, int value) {
  return CastEntry{rank, true, wire::messageName<int>(), wire::toBytes(value)};
}

TEST(Aggregation, AnUnfoldableSubtreeValueFailsThatSubtreesMembers) {
  ASSERT_TRUE(kRefuseRegistered);
  // Ranks 8..15, k=2: the first hop reduces its own reply with its
  // children's subtrees.
  CastTree tree(Slice::rowMajor({8}, 8), 2);
  std::size_t hop = tree.rootChildren()[0];
  std::vector<std::size_t> children = tree.children(hop);
  ASSERT_FALSE(children.empty());
  std::size_t child = children[0];
  std::vector<std::size_t> below = tree.subtree(child);
  ASSERT_GT(below.size(), 1u);

  std::optional<CastResult> result;
  detail::Aggregation aggregation(CastMode::kReduce, "test::Refuse<int>", 2,
                                  [&](CastResult&& r) { result = std::move(r); }, {});
  aggregation.member(okEntry(hop, 1));
  // The child's subtree: one member failed on its own, the others' replies
  // are folded into the partial value.
  CastResult partial;
  partial.entries.push_back(crown::mesh::detail::failureEntry(
      below[1], std::make_exception_ptr(RemoteError("std::runtime_error", "boom", 0, "member"))));
  partial.hasValue = true;
  partial.valueType = wire::messageName<int>();
  partial.value = wire::toBytes(7);
  aggregation.child(std::move(partial), tree, child);

  ASSERT_TRUE(result.has_value());
  std::multiset<std::uint64_t> failed;
  for (const auto& entry : result->entries) {
    EXPECT_FALSE(entry.ok);
    failed.insert(entry.rank);
  }
  EXPECT_EQ(failed, std::multiset<std::uint64_t>(below.begin(), below.end()));
  EXPECT_EQ(failed.count(0), 0u);
  for (const auto& entry : result->entries) {
    auto why = wire::fromBytes<crown::detail::RemoteFailure>(entry.payload);
    std::string expected = entry.rank == below[1] ? "boom" : "do not combine";
    EXPECT_NE(why.message.find(expected), std::string::npos) << entry.rank << ": " << why.message;
  }
}

std::string failureMessage(const CastEntry& entry) {
  return wire::fromBytes<crown::detail::RemoteFailure>(entry.payload).message;
}

TEST(Aggregation, ALeafAloneAnswersAsAnAggregationOfItsOneMemberWould) {
  ASSERT_TRUE(kRefuseRegistered);
  // Collect: the member's entry, as it came.
  CastResult collected = detail::Aggregation::alone(CastMode::kCollect, "", okEntry(5, 9));
  ASSERT_EQ(collected.entries.size(), 1u);
  EXPECT_EQ(collected.entries[0].rank, 5u);
  EXPECT_TRUE(collected.entries[0].ok);
  EXPECT_EQ(wire::fromBytes<int>(collected.entries[0].payload), 9);
  EXPECT_FALSE(collected.hasValue);

  // Reduce: the value, no entry; a value of another type, or a reducer
  // nobody registered, fails the member instead.
  CastResult reduced = detail::Aggregation::alone(CastMode::kReduce, "test::Refuse<int>",
                                                  okEntry(5, 9));
  EXPECT_TRUE(reduced.entries.empty());
  ASSERT_TRUE(reduced.hasValue);
  EXPECT_EQ(wire::fromBytes<int>(reduced.value), 9);

  CastEntry text{5, true, wire::messageName<std::string>(), wire::toBytes(std::string("x"))};
  CastResult mistyped = detail::Aggregation::alone(CastMode::kReduce, "test::Refuse<int>", text);
  ASSERT_EQ(mistyped.entries.size(), 1u);
  EXPECT_FALSE(mistyped.entries[0].ok);
  EXPECT_FALSE(mistyped.hasValue);
  EXPECT_NE(failureMessage(mistyped.entries[0]).find("cannot be reduced"), std::string::npos);

  CastResult unknown = detail::Aggregation::alone(CastMode::kReduce, "test::Nobody", okEntry(5, 9));
  ASSERT_EQ(unknown.entries.size(), 1u);
  EXPECT_FALSE(unknown.entries[0].ok);
  EXPECT_NE(failureMessage(unknown.entries[0]).find("no reducer test::Nobody"), std::string::npos);
}

TEST(Aggregation, AHopLostMidStreamFailsOnlyTheMembersItHadNotRelayed) {
  // Ranks 0..15, k=2: the hop's child relayed two of its subtree's entries
  // (its own, and a failure of a member lost before), then was lost.
  CastTree tree(Slice::rowMajor({16}, 0), 2);
  std::size_t hop = tree.rootChildren()[0];
  std::size_t child = tree.children(hop)[0];
  std::vector<std::size_t> below = tree.subtree(child);
  ASSERT_GE(below.size(), 3u);  // one member below it never relayed
  std::multiset<std::uint64_t> upward;
  std::optional<CastResult> result;
  detail::Aggregation aggregation(CastMode::kStream, "", 2,
                                  [&](CastResult&& r) { result = std::move(r); },
                                  [&](CastEntry&& entry) { upward.insert(entry.rank); });
  aggregation.member(okEntry(hop, 1));
  aggregation.relay(okEntry(below[0], 2));
  aggregation.relay(crown::mesh::detail::failureEntry(
      below[1], std::make_exception_ptr(ProcessLost(static_cast<Rank>(below[1]), "h", "gone"))));
  aggregation.childLost(below, std::make_exception_ptr(ProcessLost(static_cast<Rank>(child), "h",
                                                                   "lost mid-stream")));
  ASSERT_TRUE(result.has_value());
  std::multiset<std::uint64_t> expected(below.begin(), below.end());
  expected.insert(hop);
  EXPECT_EQ(upward, expected) << "each member's entry goes up once";
}

// "test-times:N": multiplies both values, then by N (the key carries N, as
// Python's keys carry their combine function).
const bool kTimesRegistered =
    (detail::registerReducerFamily(
         "test-times:",
         [](const std::string& key) {
           int factor = std::stoi(key.substr(11));
           return std::make_shared<const detail::Reducer>(detail::Reducer{
               wire::messageName<int>(), [factor](const wire::Bytes& a, const wire::Bytes& b) {
                 return wire::toBytes(wire::fromBytes<int>(a) * wire::fromBytes<int>(b) * factor);
               }});
         }),
     true);

TEST(ReducerFamily, AKeyOfTheFamilyIsResolvedAndFolds) {
  ASSERT_TRUE(kTimesRegistered);
  EXPECT_EQ(detail::findReducer("test-other:3"), nullptr);
  ASSERT_NE(detail::findReducer("test-times:3"), nullptr);
  EXPECT_NE(detail::findReducer("test::Refuse<int>"), nullptr);  // registered keys still found

  std::optional<CastResult> result;
  detail::Aggregation aggregation(CastMode::kReduce, "test-times:10", 3,
                                  [&](CastResult&& r) { result = std::move(r); }, {});
  aggregation.member(okEntry(0, 2));
  aggregation.member(okEntry(1, 3));
  aggregation.member(okEntry(2, 4));
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->entries.empty());
  ASSERT_TRUE(result->hasValue);
  EXPECT_EQ(wire::fromBytes<int>(result->value), 2 * 3 * 10 * 4 * 10);
}

TEST(ReducerFamily, TheFirstFamilyOfAPrefixWins) {
  ASSERT_TRUE(kTimesRegistered);
  detail::registerReducerFamily(
      "test-times:", [](const std::string&) { return std::shared_ptr<const detail::Reducer>(); });
  EXPECT_NE(detail::findReducer("test-times:2"), nullptr);
}

}  // namespace
}  // namespace crown::mesh
