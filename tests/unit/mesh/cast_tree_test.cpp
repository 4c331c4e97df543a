// Tree shape: for meshes of 1 to 4,096 ranks, sub-boxes and strided slices,
// every member is reached exactly once, no hop sends more than k messages,
// and the depth stays within ceil(log_k n) + 1.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>
#include <set>

#include "crown/common/error.h"
#include "crown/mesh/cast_tree.h"
#include "crown/mesh/shape.h"

namespace crown::mesh {
namespace {

std::size_t ceilLog(std::size_t n, std::size_t k) {
  std::size_t depth = 0;
  for (std::size_t reach = 1; reach < n; reach *= k) ++depth;
  return depth;
}

// Walks the tree from the sender as the casts would travel, and checks it.
void checkTree(const Slice& slice, std::size_t k) {
  SCOPED_TRACE("slice " + slice.toString() + ", k=" + std::to_string(k));
  CastTree tree(slice, k);
  std::map<std::size_t, int> visits;
  std::size_t maxDepth = 0;
  std::deque<std::pair<std::size_t, std::size_t>> frontier;  // (rank, depth)
  auto first = tree.rootChildren();
  ASSERT_LE(first.size(), k);
  for (auto rank : first) frontier.emplace_back(rank, 1);
  while (!frontier.empty()) {
    auto [rank, depth] = frontier.front();
    frontier.pop_front();
    ASSERT_TRUE(slice.contains(rank)) << "rank " << rank << " is not in the slice";
    ASSERT_EQ(++visits[rank], 1) << "rank " << rank << " reached twice";
    ASSERT_EQ(tree.depth(rank), depth);
    maxDepth = std::max(maxDepth, depth);
    auto children = tree.children(rank);
    ASSERT_LE(children.size(), k) << "rank " << rank << " sends more than k";
    for (auto child : children) frontier.emplace_back(child, depth + 1);
  }
  auto members = slice.ranks();
  ASSERT_EQ(visits.size(), members.size());  // every member, each once (above)
  for (auto rank : members)
    ASSERT_EQ(visits.count(rank), 1u) << "rank " << rank << " never reached";
  EXPECT_EQ(tree.height(), maxDepth);
  if (k >= 2) EXPECT_LE(maxDepth, ceilLog(members.size(), k) + 1);
  for (std::size_t i = 0; i < members.size(); ++i) ASSERT_EQ(tree.rankAt(i), members[i]);
  // subtree(r): exactly r and what the walk reaches from it (checked for a few members).
  for (std::size_t i = 0; i < members.size(); i += 1 + members.size() / 7) {
    std::set<std::size_t> expected;
    std::deque<std::size_t> below{members[i]};
    while (!below.empty()) {
      expected.insert(below.front());
      for (auto child : tree.children(below.front())) below.push_back(child);
      below.pop_front();
    }
    auto subtree = tree.subtree(members[i]);
    ASSERT_EQ(std::set<std::size_t>(subtree.begin(), subtree.end()), expected);
    ASSERT_EQ(subtree.size(), expected.size()) << "a member listed twice";
  }
}

TEST(CastTree, WholeMeshesFromOneToFourThousandRanks) {
  for (std::size_t n : {1, 2, 3, 5, 15, 16, 17, 64, 100, 255, 256, 257, 1000, 4095, 4096}) {
    for (std::size_t k : {2, 3, 16}) checkTree(Slice::rowMajor({n}), k);
  }
  for (std::size_t n = 1; n <= 300; ++n) checkTree(Slice::rowMajor({n}), 16);
}

TEST(CastTree, DepthIsLogarithmic) {
  CastTree tree(Slice::rowMajor({4096}), 16);
  EXPECT_EQ(tree.height(), 3u);  // 16 + 256 + 4096 >= 4096
  EXPECT_EQ(tree.rootChildren().size(), 16u);
  EXPECT_EQ(CastTree(Slice::rowMajor({16}), 16).height(), 1u);
  EXPECT_EQ(CastTree(Slice::rowMajor({17}), 16).height(), 2u);
}

TEST(CastTree, SubBoxesAndStridedSlices) {
  Shape world{{"hosts", 8}, {"gpus", 8}, {"threads", 4}};
  checkTree(world.slice(), 16);
  checkTree(world.range("hosts", 2, 7).slice(), 4);
  checkTree(world.at("gpus", 3).slice(), 3);
  checkTree(world.range("gpus", 1, kEnd, 3).range("threads", 0, 4, 2).slice(), 2);
  checkTree(world.at("hosts", 5).range("threads", 3, 4).slice(), 16);
  checkTree(Shape{{"a", 16}, {"b", 16}, {"c", 16}}.range("a", 0, 16, 5).slice(), 16);
}

TEST(CastTree, AFanOutOfOneIsAChainAndOfNIsFlat) {
  Slice slice = Slice::rowMajor({10});
  checkTree(slice, 1);
  EXPECT_EQ(CastTree(slice, 1).height(), 10u);
  CastTree flat(slice, 10);
  EXPECT_EQ(flat.rootChildren().size(), 10u);
  EXPECT_EQ(flat.height(), 1u);
  for (auto rank : slice.ranks()) EXPECT_TRUE(flat.children(rank).empty());
}

TEST(CastTree, BadInputIsAClearError) {
  EXPECT_THROW(CastTree(Slice::rowMajor({4}), 0), ConfigError);
  CastTree tree(Slice::rowMajor({4}, 10), 2);
  EXPECT_THROW(tree.children(3), ConfigError);  // rank 3 is not in {10..13}
  EXPECT_THROW(tree.rankAt(4), ConfigError);
}

}  // namespace
}  // namespace crown::mesh
