// A worker killed with SIGKILL in the middle of a request (run under
// `mpirun --enable-recovery`, which keeps the survivors alive): the
// controller's get() throws ProcessLost promptly, and the other ranks serve on.
#include <signal.h>

#include "support/mpi_harness.h"
#include "test_actors.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

TEST(KillTest, ALostWorkerFailsItsRequestsAndSurvivorsServeOn) {
  Controller& ctl = *controller();
  ASSERT_GE(ctl.size(), 4u);
  auto workers = ctl.spawnOnEveryRank<Worker>("worker", std::string("k"));
  Identity victim = workers[2].call<Identity>(WhoAreYou{}).get(10s);

  auto inFlight = workers[2].call<Rank>(Nap{60000});
  std::this_thread::sleep_for(200ms);  // the request is being handled now
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  auto killed = std::chrono::steady_clock::now();
  try {
    inFlight.get(10s);
    FAIL() << "the request to a killed rank succeeded";
  } catch (const ProcessLost& e) {
    auto elapsed = std::chrono::steady_clock::now() - killed;
    EXPECT_LT(elapsed, 5s);
    EXPECT_EQ(e.rank(), 2u);
    EXPECT_EQ(e.host(), victim.host);
    std::cout << "ProcessLost after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
              << " ms: " << e.what() << std::endl;
  }

  EXPECT_EQ(workers[1].call<Identity>(WhoAreYou{}).get(10s).rank, 1u);
  EXPECT_EQ(workers[3].call<Identity>(WhoAreYou{}).get(10s).rank, 3u);
  EXPECT_EQ(workers[0].call<Identity>(WhoAreYou{}).get(10s).rank, 0u);
  // A survivor calling the dead rank gets the error too, as a remote failure.
  EXPECT_THROW(workers[1].call<Rank>(AskPeer{ActorRef<>(workers[2].id())}).get(10s), RemoteError);

  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(workers[2].call<Identity>(WhoAreYou{}).get(10s), ProcessLost);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);  // known dead: fails at once
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
