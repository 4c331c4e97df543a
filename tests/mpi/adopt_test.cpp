// MPI initialised before crown (as mpi4py does): crown adopts it, and the
// program that initialised MPI finalises it after crown::run returns.
#include <mpi.h>

#include "support/mpi_harness.h"
#include "test_actors.h"

namespace crown::testing {
namespace {

TEST(AdoptTest, CrownRunsOnAnMpiItDidNotInitialise) {
  Controller& ctl = *controller();
  auto workers = ctl.spawnOnEveryRank<Worker>("adopted", std::string("a"));
  for (Rank r = 0; r < ctl.size(); ++r) {
    EXPECT_EQ(workers[r].call<Identity>(WhoAreYou{}).get(std::chrono::seconds(10)).rank, r);
  }
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int code = crown::testing::runTestsOnController(argc, argv);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    std::cerr << "crown finalised an MPI it did not initialise" << std::endl;
    return 3;
  }
  MPI_Finalize();
  return code;
}
