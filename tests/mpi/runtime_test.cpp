// The core runtime under a real `mpirun -n 4`: spawn, request/reply across
// ranks, remote exceptions, ordering, actor-to-actor calls, timeouts.
#include <set>

#include "support/mpi_harness.h"
#include "test_actors.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

class Fragile : public Actor {
 public:
  Fragile() {
    if (Runtime::current().topology().rank == 2) throw std::runtime_error("rank 2 refuses");
  }
};

class RuntimeTest : public ::testing::Test {
 protected:
  Controller& ctl = *controller();
};

TEST_F(RuntimeTest, TopologyDescribesTheLaunch) {
  const Topology& topo = ctl.topology();
  EXPECT_EQ(topo.rank, 0u);
  EXPECT_EQ(topo.size, 4u);
  EXPECT_EQ(topo.hostCount, 1);
  EXPECT_EQ(topo.localSize, 4);
  ASSERT_EQ(topo.hostNames.size(), 4u);
}

TEST_F(RuntimeTest, EveryRankAnswersFromItsOwnProcess) {
  auto workers = ctl.spawnOnEveryRank<Worker>("worker", std::string("w"));
  ASSERT_EQ(workers.size(), 4u);
  std::set<int> pids;
  for (Rank r = 0; r < 4; ++r) {
    Identity id = workers[r].call<Identity>(WhoAreYou{}).get(10s);
    EXPECT_EQ(id.rank, r);
    EXPECT_EQ(id.host, ctl.topology().hostNames[r]);
    pids.insert(id.pid);
  }
  EXPECT_EQ(pids.size(), 4u);
}

TEST_F(RuntimeTest, RemoteExceptionNamesTypeMessageRankAndActor) {
  auto worker = ctl.spawn<Worker>(2, "thrower", std::string("t"));
  try {
    worker.call<int>(Raise{"bad input"}).get(10s);
    FAIL() << "no exception";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.remoteType(), "std::logic_error");
    EXPECT_EQ(e.remoteMessage(), "bad input");
    EXPECT_EQ(e.rank(), 2u);
    EXPECT_EQ(e.actor(), "thrower");
  }
  EXPECT_EQ(worker.call<Identity>(WhoAreYou{}).get(10s).rank, 2u);  // it survived
}

TEST_F(RuntimeTest, MessagesFromEachSenderArriveInSendOrder) {
  auto workers = ctl.spawnOnEveryRank<Worker>("ordered", std::string("o"));
  ActorRef<> target(workers[3].id());
  constexpr int kCount = 10000;
  auto fromOne = workers[1].call<void>(Blast{target, kCount});
  auto fromTwo = workers[2].call<void>(Blast{target, kCount});
  for (int i = 0; i < kCount; ++i) target.send(Record{0, i});
  fromOne.get(30s);
  fromTwo.get(30s);
  auto history = workers[3].call<std::vector<std::pair<int, int>>>(History{}).get(30s);
  ASSERT_EQ(history.size(), 3u * kCount);
  std::map<int, int> next;  // ORD-1: per sender, values arrive 0, 1, 2, ...
  for (auto [sender, value] : history) ASSERT_EQ(value, next[sender]++) << "from rank " << sender;
  EXPECT_EQ(next[0], kCount);
  EXPECT_EQ(next[1], kCount);
  EXPECT_EQ(next[2], kCount);
}

TEST_F(RuntimeTest, ActorsCallEachOtherAcrossRanks) {
  auto workers = ctl.spawnOnEveryRank<Worker>("peers", std::string("p"));
  EXPECT_EQ(workers[1].call<Rank>(AskPeer{ActorRef<>(workers[2].id())}).get(10s), 2u);
  EXPECT_EQ(workers[3].call<Rank>(AskPeer{ActorRef<>(workers[0].id())}).get(10s), 0u);
}

// The answer comes back over the very link that carried the question: over
// shared memory the handler runs on that link's reader, which must hand the
// reading on while it waits (reader_turns.h), or the answer is never read.
TEST_F(RuntimeTest, AnActorWaitsForAnAnswerFromTheRankThatAskedIt) {
  auto workers = ctl.spawnOnEveryRank<Worker>("asked", std::string("a"));
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(workers[1].call<Rank>(AskPeer{ActorRef<>(workers[0].id())}).get(10s), 0u);
  }
}

TEST_F(RuntimeTest, SlowRequestTimesOutAndTheActorKeepsServing) {
  auto worker = ctl.spawn<Worker>(1, "sleepy", std::string("s"));
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(worker.call<Rank>(Nap{1500}).get(100ms), Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(worker.call<Rank>(Nap{0}).get(10s), 1u);
}

TEST_F(RuntimeTest, SpawnFailureNamesTheRankAndTheCause) {
  try {
    ctl.spawnOnEveryRank<Fragile>("fragile");
    FAIL() << "spawn succeeded";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 2 refuses"), std::string::npos) << what;
    EXPECT_EQ(what.find("rank 1:"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
