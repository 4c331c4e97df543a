// A rank killed in the middle of a collective (run under `mpirun
// --enable-recovery`, which keeps the survivors alive): the controller's
// fetch fails promptly naming the lost rank, no survivor's engine stays
// blocked, later collectives over groups with the lost rank fail at once,
// groups of survivors only still reduce, and so does a new mesh of the
// survivors.
#include <signal.h>
#include <unistd.h>

#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"
#include "support/mpi_harness.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;
using namespace crown::tensor;
using Clock = std::chrono::steady_clock;

const bool kRegistered = [] {
  registerKernel("test.pid", [](KernelContext&, const std::vector<LocalTensor>&) {
    LocalTensor t = LocalTensor::allocate(ScalarType::i64, {1});
    *t.data<std::int64_t>() = ::getpid();
    return std::vector<LocalTensor>{t};
  });
  // Stalls ints[0] ms on rank ints[1], then gives four ones.
  registerKernel("test.stall", [](KernelContext& c, const std::vector<LocalTensor>&) {
    if (c.rank == static_cast<Rank>(c.call.ints.at(1)))
      std::this_thread::sleep_for(std::chrono::milliseconds(c.call.ints.at(0)));
    LocalTensor t = LocalTensor::allocate(ScalarType::f64, {4});
    std::fill(t.data<double>(), t.data<double>() + 4, 1.0);
    return std::vector<LocalTensor>{t};
  });
  return true;
}();

std::string failureOf(const Future<LocalTensor>& fetched, std::chrono::milliseconds* took) {
  auto start = Clock::now();
  try {
    fetched.get(30s);
  } catch (const std::exception& e) {
    *took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    return e.what();
  }
  return "(no failure)";
}

TEST(TensorKill, ARankLostMidCollectiveFailsTheFetchAndSurvivorsReduceOn) {
  TensorMesh tm(ProcMesh(mesh::Shape({{"dp", 2}, {"tp", 2}})));
  std::map<std::string, std::size_t> rank0{{"dp", 0}, {"tp", 0}}, rank3{{"dp", 1}, {"tp", 1}};
  auto pid = static_cast<pid_t>(
      tm.call("test.pid", {}, {{{1}, ScalarType::i64}})[0].fetch(rank3).get(10s).item());

  auto stalled = tm.call("test.stall", {}, {{{4}, ScalarType::f64}}, {60000, 3})[0];
  auto total = stalled.reduce(std::vector<std::string>{"dp", "tp"});
  auto inFlight = total.fetch(rank0);  // rank 0's engine waits in the allreduce for rank 3
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto killed = Clock::now();
  std::chrono::milliseconds took{};
  std::string why = failureOf(inFlight, &took);
  auto afterKill = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed);
  EXPECT_NE(why.find("rank 3"), std::string::npos) << why;
  EXPECT_LT(afterKill, 10s) << why;
  std::cout << "fetch failed " << afterKill.count() << " ms after the kill: " << why << std::endl;

  // Later collectives over a group with rank 3 fail at once, naming it.
  auto ones = tm.ones({4}, ScalarType::f64);
  auto again = ones.reduce(std::vector<std::string>{"dp", "tp"});
  why = failureOf(again.fetch(rank0), &took);
  EXPECT_NE(why.find("rank 3"), std::string::npos) << why;
  EXPECT_LT(took, 5s);
  std::cout << "a later collective failed in " << took.count() << " ms: " << why << std::endl;

  // The {tp} group of ranks 0 and 1 has no lost member: it reduces.
  auto survivors = ones.reduce("tp").fetch(rank0).get(10s);
  EXPECT_EQ(survivors.data<double>()[0], 2.0);
  std::cout << "survivors reduced" << std::endl;

  // A mesh of the three survivors: its groups are made over their members
  // only (MPI_Comm_create_group), so it runs every collective again.
  auto start = Clock::now();
  TensorMesh alive(ProcMesh(mesh::Shape({{"ranks", 4}}).range("ranks", 0, 3)));
  auto three = alive.ones({4}, ScalarType::f64).reduce("ranks");
  EXPECT_EQ(three.fetch({{"ranks", 2}}).get(10s).data<double>()[0], 3.0);
  auto gathered = alive.ones({2}, ScalarType::f64).allgather({"ranks"}).fetch().get(10s);
  EXPECT_EQ(gathered.shape(), (std::vector<std::int64_t>{3, 2}));
  std::cout << "a mesh of the survivors reduced, "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()
            << " ms from its creation" << std::endl;
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
