// DLV-1 on real ranks (mpirun --enable-recovery -n 6, CROWN_CAST_FANOUT=2):
// rank 1, a hop of the cast tree over ranks 4 and 5, is killed in the
// middle of a cast. The cast completes, ranks 1, 4 and 5 with ProcessLost
// and the others with their values; later casts route around rank 1.
#include <signal.h>

#include <set>

#include "crown/mesh/cast_tree.h"
#include "support/mpi_harness.h"
#include "test_actors.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

std::set<std::size_t> failedRanks(const ValueMesh<Rank>& replies) {
  std::set<std::size_t> failed;
  for (const auto& failure : replies.failures()) {
    failed.insert(failure.rank);
    EXPECT_THROW(std::rethrow_exception(failure.error), ProcessLost) << failure.what;
  }
  return failed;
}

TEST(MeshKillTest, AHopKilledMidCastFailsItsSubtreeOnly) {
  Controller& ctl = *controller();
  ASSERT_EQ(ctl.size(), 6u);
  ASSERT_EQ(mesh::castFanout(), 2u) << "run with CROWN_CAST_FANOUT=2";
  auto workers = ctl.worldFlat().spawn<Worker>("worker", std::string("k"));
  mesh::CastTree tree(workers.shape().slice(), 2);
  ASSERT_EQ(tree.subtree(1), (std::vector<std::size_t>{1, 4, 5}));
  Identity victim = workers.at("ranks", 1).call_one<Identity>(WhoAreYou{}).get(10s);

  auto inFlight = workers.call<Rank>(Nap{1500});
  std::this_thread::sleep_for(300ms);  // every member has the cast and naps
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  auto killed = std::chrono::steady_clock::now();
  auto replies = inFlight.get(10s);
  std::cout << "cast completed "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - killed)
                   .count()
            << " ms after the kill" << std::endl;
  EXPECT_EQ(failedRanks(replies), (std::set<std::size_t>{1, 4, 5}));
  for (std::size_t r : {0, 2, 3}) EXPECT_EQ(replies.at(r), r);

  auto later = workers.call<Rank>(Nap{0}).get(10s);
  EXPECT_EQ(failedRanks(later), (std::set<std::size_t>{1})) << "rank 1's children are adopted";
  for (std::size_t r : {0, 2, 3, 4, 5}) EXPECT_EQ(later.at(r), r);
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
