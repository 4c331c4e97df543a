// A peer lost to the MPI service, under `mpirun --enable-recovery -n 4`
// (which keeps the survivors of a killed rank alive): abandonPeer fails the
// operations waiting on that peer with ProcessLost at once, whether a test
// calls it or the Lifecycle module does on a lost link, and the service
// thread goes on serving everything else. The tests run in order: the
// second kills rank 2.
#include <signal.h>

#include "mpi_probe.h"
#include "support/mpi_harness.h"

namespace crown::testing {
namespace {

struct AbandonCase {  // on rank 1: abandon rank 2 by hand
  template <class A>
  void serialize(A&, unsigned) {}
};
struct ArmCase {  // post a recv from `peer`, after talking to its probe so a link to it exists
  Rank peer = 0;
  ActorRef<> peerProbe;
  template <class A>
  void serialize(A& a, unsigned) {
    a& peer& peerProbe;
  }
};
struct AwaitArmed {  // how the armed recv ended
  Rank peer = 0;
  template <class A>
  void serialize(A& a, unsigned) {
    a& peer;
  }
};

class AbandonProbe : public MpiProbe {
 public:
  AbandonProbe() {
    handle<AbandonCase>([](const AbandonCase&) { return abandonByHand(); });
    handle<ArmCase>([this](const ArmCase& c) {
      c.peerProbe.call<int>(Pid{}).get(10s);
      armed_ =
          Proc::current().mpi().recv(Comm::world(), c.peer, 80, &armedData_, sizeof armedData_);
    });
    handle<AwaitArmed>([this](const AwaitArmed& c) {
      Checks checks;
      expectLost(checks, armed_, c.peer, "the recv from the killed rank");
      return checks.failures();
    });
  }

 private:
  static std::string abandonByHand() {
    MpiService& mpi = Proc::current().mpi();
    Rank me = Proc::current().rank();
    Checks checks;
    std::int64_t never = 0, mine = 0, value = 9, later = 0;
    auto lost = mpi.recv(Comm::world(), 2, 77, &never, sizeof never);  // rank 2 never sends it
    auto other = mpi.recv(Comm::world(), me, 78, &mine, sizeof mine);
    std::this_thread::sleep_for(100ms);
    checks.expect(!lost.isReady(), "the recv from rank 2 completed with nothing sent");

    auto start = std::chrono::steady_clock::now();
    mpi.abandonPeer(2, "declared lost by the test");
    expectLost(checks, lost, 2, "the pending recv from rank 2");
    auto elapsed = std::chrono::steady_clock::now() - start;
    checks.expect(elapsed < 500ms,
                  "the recv failed only after " + std::to_string(elapsed / 1ms) + " ms");
    try {
      lost.get();
    } catch (const ProcessLost& e) {
      checks.expect(e.reason() == "declared lost by the test", "reason: " + e.reason());
    } catch (...) {
    }
    // The others are served on: the pending recv from this rank completes.
    mpi.send(Comm::world(), me, 78, &value, sizeof value).get(5s);
    checks.expect(other.get(5s) == sizeof mine && mine == 9, "the other recv got other bytes");
    // Later operations with rank 2 fail as they are submitted.
    expectLost(checks, mpi.recv(Comm::world(), 2, 79, &later, sizeof later), 2, "a later recv");
    expectLost(checks, mpi.barrier(Comm::world()), 2, "a world barrier");
    // MPI let go of the cancelled recv (MPI_Cancel, then MPI_Testsome).
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (mpi.stats().draining != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    checks.expect(mpi.stats().draining == 0, "the cancelled recv was never released");
    std::cout << "recv from rank 2 failed " << elapsed / 1us << " us after abandonPeer"
              << std::endl;
    return checks.failures();
  }

  Future<std::size_t> armed_;
  std::int64_t armedData_ = 0;
};

std::vector<ActorRef<AbandonProbe>>& probes() {
  static std::vector<ActorRef<AbandonProbe>> all;
  return all;
}
std::uint32_t rows = 0, columns = 0;  // the {2, 2} communicators along dims 1 and 0

// Allreduce of the members' ranks along `comm`, run on `ranks` (a whole group each).
void expectReduceAlong(std::uint32_t comm, const std::vector<Rank>& ranks,
                       const std::vector<std::vector<Rank>>& groups) {
  std::vector<ActorRef<AbandonProbe>> some;
  for (Rank r : ranks) some.push_back(probes()[r]);
  auto replies = onEveryProbe<std::vector<double>>(
      some, ReduceCase{static_cast<int>(DType::i64), static_cast<int>(ReduceOp::sum), comm});
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    EXPECT_EQ(replies[i], expectedReduce(DType::i64, ReduceOp::sum, groups[i]))
        << "rank " << ranks[i] << " along communicator " << comm;
  }
}

TEST(MpiAbandonTest, AnAbandonedPeerFailsItsOperationsAndTheRestGoOn) {
  Controller& ctl = *controller();
  ASSERT_EQ(ctl.size(), 4u);
  probes() = ctl.spawnOnEveryRank<AbandonProbe>("abandon-probe");
  // Made while every rank is alive: creating a communicator is collective.
  columns = onEveryProbe<AlongResult>(probes(), AlongCase{{2, 2}, 0})[0].first;
  rows = onEveryProbe<AlongResult>(probes(), AlongCase{{2, 2}, 1})[0].first;

  EXPECT_EQ(probes()[1].call<std::string>(AbandonCase{}).get(30s), "");
  // Rank 1 gave up on rank 2 only: its collectives without rank 2 work.
  expectReduceAlong(rows, {0, 1, 2, 3}, {{0, 1}, {0, 1}, {2, 3}, {2, 3}});
  expectReduceAlong(columns, {1, 3}, {{1, 3}, {1, 3}});
}

TEST(MpiAbandonTest, AKilledRankFailsPendingOperationsThroughTheLifecycle) {
  Controller& ctl = *controller();
  ASSERT_EQ(probes().size(), 4u) << "runs after the test above";
  MpiService& mpi = ctl.runtime().proc().mpi();
  probes()[3].call<void>(ArmCase{2, ActorRef<>(probes()[2].id())}).get(10s);
  std::int64_t never = 0;
  auto mine = mpi.recv(Comm::world(), 2, 81, &never, sizeof never);
  int pid = probes()[2].call<int>(Pid{}).get(10s);

  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto killed = std::chrono::steady_clock::now();
  Checks checks;
  // No test calls abandonPeer here: the lost link reaches Lifecycle::peerLost.
  expectLost(checks, mine, 2, "the controller's recv from the killed rank");
  EXPECT_EQ(checks.failures(), "");
  auto elapsed = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(elapsed, 5s);
  std::cout << "MPI recv abandoned " << elapsed / 1ms << " ms after the kill" << std::endl;
  EXPECT_EQ(probes()[3].call<std::string>(AwaitArmed{2}).get(30s), "");

  // The survivors' communicators without rank 2 still reduce.
  expectReduceAlong(rows, {0, 1}, {{0, 1}, {0, 1}});
  expectReduceAlong(columns, {1, 3}, {{1, 3}, {1, 3}});
  EXPECT_GE(mpi.stats().failed, 1u);
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
