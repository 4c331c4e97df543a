// Meshes on real ranks (mpirun -n 4): the world mesh, spawn by cast, every
// adverb, reductions, errors, ORD-1 across casts and direct sends, and a
// cast sent by an actor on another rank.
#include <set>

#include "support/mpi_harness.h"
#include "test_actors.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;
using mesh::Range;

/// Casts to the mesh it is given: casts start on any rank, from actors too.
struct SumRanksOf {
  ActorMesh<Worker> mesh;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& mesh;
  }
};
class Relay : public Actor {
 public:
  Relay() {
    handle<SumRanksOf>([](const SumRanksOf& ask) {
      return ask.mesh.reduce<Rank>(Nap{0}, mesh::Sum{}).get(10s);
    });
  }
};

class FailsOnRankTwo : public Actor {
 public:
  FailsOnRankTwo() {
    if (mesh::here().rank == 2) throw std::runtime_error("no room on rank two");
  }
};

class MeshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(controller()->size(), 4u);
    workers_ = controller()->world().spawn<Worker>("worker", std::string("m"));
  }
  ActorMesh<Worker> workers_;
};

TEST_F(MeshTest, TheWorldIsHostsByProcs) {
  ProcMesh world = controller()->world();
  EXPECT_EQ(world.size("hosts"), 1u);  // every rank of this test runs on this machine
  EXPECT_EQ(world.size("procs"), 4u);
  EXPECT_EQ(controller()->worldFlat().shape().toString(), "{ranks=4}");
}

TEST_F(MeshTest, CallReturnsAValueMeshByCoordinates) {
  auto ids = workers_.call<Identity>(WhoAreYou{}).get(10s);
  ASSERT_EQ(ids.size(), 4u);
  for (std::size_t p = 0; p < 4; ++p) EXPECT_EQ(ids.get({{"hosts", 0}, {"procs", p}}).rank, p);
  std::set<int> pids;
  for (const auto& id : ids.values()) pids.insert(id.pid);
  EXPECT_EQ(pids.size(), 4u) << "four processes";
}

TEST_F(MeshTest, EveryAdverb) {
  auto one = workers_.slice({{"hosts", 0}, {"procs", 3}});
  EXPECT_EQ(one.call_one<Identity>(WhoAreYou{}).get(10s).rank, 3u);
  EXPECT_THROW(workers_.call_one<Identity>(WhoAreYou{}), ConfigError);
  std::set<Rank> chosen;
  for (int i = 0; i < 8; ++i) chosen.insert(workers_.choose<Identity>(WhoAreYou{}).get(10s).rank);
  EXPECT_EQ(chosen.size(), 4u);
  auto stream = workers_.stream<Identity>(WhoAreYou{});
  std::set<Rank> streamed;
  while (auto item = stream.next(10s)) streamed.insert(item->get().rank);
  EXPECT_EQ(streamed, (std::set<Rank>{0, 1, 2, 3}));
  EXPECT_EQ(workers_.reduce<Rank>(Nap{0}, mesh::Sum{}).get(10s), 6u);
  EXPECT_EQ(workers_.reduce<Rank>(Nap{0}, mesh::Max{}).get(10s), 3u);
  auto odd = workers_.slice({{"procs", Range{1, mesh::kEnd, 2}}});
  EXPECT_EQ(odd.reduce<Rank>(Nap{0}, mesh::Sum{}).get(10s), 4u);
}

TEST_F(MeshTest, ARaisingMemberGetsItsErrorAndTheOthersTheirValues) {
  auto replies = workers_.call<int>(Raise{"bad batch"}).get(10s);
  ASSERT_EQ(replies.failures().size(), 4u);
  try {
    replies.get({{"hosts", 0}, {"procs", 2}});
    FAIL() << "no error";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.rank(), 2u);
    EXPECT_EQ(e.remoteMessage(), "bad batch");
  }
}

TEST_F(MeshTest, SpawnFailureNamesTheRank) {
  try {
    controller()->world().spawn<FailsOnRankTwo>("picky");
    FAIL() << "spawn did not throw";
  } catch (const MeshError& e) {
    ASSERT_EQ(e.failures().size(), 1u);
    EXPECT_EQ(e.failures()[0].rank, 2u);
    EXPECT_NE(std::string(e.what()).find("no room on rank two"), std::string::npos) << e.what();
  }
}

// ORD-1: casts to overlapping slices, direct sends and requests from one
// sender reach every actor in send order.
TEST_F(MeshTest, OrderHoldsAcrossCastsAndDirectSends) {
  std::vector<ActorMesh<Worker>> targets{workers_, workers_.range("procs", Range{1, 3}),
                                         workers_.range("procs", Range{0, 4, 2})};
  int n = 0;
  for (int round = 0; round < 500; ++round) {
    targets[round % 3].broadcast(Record{0, n++});
    workers_.ref({{"hosts", 0}, {"procs", std::size_t(round % 4)}}).send(Record{0, n++});
    if (round % 10 == 0) (void)workers_.call<void>(Record{0, n++});
  }
  auto histories = workers_.call<std::vector<std::pair<int, int>>>(History{}).get(30s);
  for (const auto& history : histories.values()) {
    ASSERT_GT(history.size(), 100u);
    for (std::size_t i = 1; i < history.size(); ++i)
      ASSERT_LT(history[i - 1].second, history[i].second) << "out of order at " << i;
  }
}

TEST_F(MeshTest, AnActorOnAnotherRankCastsToTheMesh) {
  auto relay = controller()->spawn<Relay>(3, "relay");
  EXPECT_EQ(relay.call<Rank>(SumRanksOf{workers_}).get(10s), 6u);
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
