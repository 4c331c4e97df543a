// Which collectives in a row run as one allreduce (Collectives::fusable):
// decided from the commands alone, so every member groups them alike.
// Their results, and the way back to one at a time when a member's input
// fails, run on real ranks: python/tests/test_tensor_engine.py.
#include <gtest/gtest.h>

#include "tensor/collectives.h"

namespace crown::tensor::detail {
namespace {

Collective allreduce(RefId source, RefId result, std::vector<std::int64_t> shape = {16},
                     Reduction reduction = Reduction::sum, ScalarType type = ScalarType::f32,
                     std::vector<std::string> dims = {"procs"}) {
  Collective c;
  c.kind = CollectiveKind::allreduce;
  c.reduction = reduction;
  c.dims = std::move(dims);
  c.source = source;
  c.result = result;
  c.expected = true;
  c.expectShape = std::move(shape);
  c.expectType = type;
  return c;
}

TEST(FusedCollectives, SmallAllreducesInARowOverTheSameDimsFuse) {
  std::vector<Command> commands{allreduce(1, 1), allreduce(2, 2), allreduce(3, 30),
                                Call{"ones", {}, {4}}, allreduce(5, 5)};
  EXPECT_EQ(Collectives::fusable(commands, 0), 3u);  // up to the call
  EXPECT_EQ(Collectives::fusable(commands, 1), 2u);
  EXPECT_EQ(Collectives::fusable(commands, 3), 0u);  // not a collective
  EXPECT_EQ(Collectives::fusable(commands, 4), 1u);  // alone at the end
}

TEST(FusedCollectives, ARunEndsWhereTheNextDiffersInDimsReductionTypeOrKind) {
  Collective broadcast = allreduce(2, 2);
  broadcast.kind = CollectiveKind::broadcast;
  Collective undescribed = allreduce(2, 2);
  undescribed.expected = false;  // its shape unknown to the controller: alone
  for (const Collective& next :
       {allreduce(2, 2, {16}, Reduction::max), allreduce(2, 2, {16}, Reduction::sum, ScalarType::f64),
        allreduce(2, 2, {16}, Reduction::sum, ScalarType::f32, {"hosts"}), broadcast, undescribed}) {
    std::vector<Command> commands{allreduce(1, 1), next};
    EXPECT_EQ(Collectives::fusable(commands, 0), 1u);
  }
  std::vector<Command> alone{undescribed, allreduce(3, 3)};
  EXPECT_EQ(Collectives::fusable(alone, 0), 0u);
}

TEST(FusedCollectives, OneThatReadsOrWritesWhatAnEarlierOneTouchedStartsAnotherRun) {
  std::vector<Command> twice{allreduce(1, 1), allreduce(1, 1)};  // x.reduce_() twice: in order
  EXPECT_EQ(Collectives::fusable(twice, 0), 1u);
  std::vector<Command> chained{allreduce(1, 2), allreduce(2, 3)};  // reads the first's result
  EXPECT_EQ(Collectives::fusable(chained, 0), 1u);
  std::vector<Command> overwrites{allreduce(1, 2), allreduce(3, 1)};  // writes the first's source
  EXPECT_EQ(Collectives::fusable(overwrites, 0), 1u);
}

TEST(FusedCollectives, ARunStaysWithinOneMebibyte) {
  // 256 Ki floats = 1 MiB: two halves fuse, a third does not join them.
  std::vector<Command> commands{allreduce(1, 1, {128 * 1024}), allreduce(2, 2, {128 * 1024}),
                                allreduce(3, 3, {4})};
  EXPECT_EQ(Collectives::fusable(commands, 0), 2u);
  std::vector<Command> big{allreduce(1, 1, {512 * 1024}), allreduce(2, 2, {4})};
  EXPECT_EQ(Collectives::fusable(big, 0), 0u);  // over the limit alone: the plain path
}

}  // namespace
}  // namespace crown::tensor::detail
