// The asynchronous MPI service (THR-1) under a real `mpirun -n 4`: typed
// collectives and point-to-point across ranks (through MpiProbe actors),
// communicators along mesh dimensions, and, on the controller's own rank,
// what the service thread does: it serves call() while a recv is pending,
// makes every MPI call, sleeps when idle, and turns MPI errors into failed
// futures. Losing a peer is in mpi_abandon_test.cpp (it kills a rank).
#include <mpi.h>

#include <atomic>
#include <cstdlib>

#include "mpi_probe.h"
#include "support/mpi_harness.h"

namespace crown::testing {
namespace {

class MpiServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (probes().empty()) probes() = ctl.spawnOnEveryRank<MpiProbe>("mpi-probe");
  }
  static std::vector<ActorRef<MpiProbe>>& probes() {
    static std::vector<ActorRef<MpiProbe>> all;
    return all;
  }
  MpiService& mpi() { return ctl.runtime().proc().mpi(); }
  Controller& ctl = *controller();
};

TEST_F(MpiServiceTest, AllreduceOfEveryTypeAndOpGivesTheFoldedValues) {
  ASSERT_EQ(ctl.size(), 4u);
  std::vector<Rank> world{0, 1, 2, 3};
  for (DType type : kDTypes) {
    for (ReduceOp op : kReduceOps) {
      ReduceCase c{static_cast<int>(type), static_cast<int>(op), Comm::world().id()};
      auto replies = onEveryProbe<std::vector<double>>(probes(), c);
      auto want = expectedReduce(type, op, world);
      for (Rank r = 0; r < 4; ++r) {
        EXPECT_EQ(replies[r], want) << "dtype " << c.dtype << ", op " << c.op << ", rank " << r;
      }
    }
  }
}

TEST_F(MpiServiceTest, BroadcastFromAnyRootReachesEveryRank) {
  for (Rank root : {0u, 2u}) {
    // 1 MiB: past the eager limit, so the loop must drive the rendezvous.
    auto matches = onEveryProbe<bool>(probes(), BroadcastCase{root, 1u << 20});
    for (Rank r = 0; r < 4; ++r) EXPECT_TRUE(matches[r]) << "root " << root << ", rank " << r;
  }
}

TEST_F(MpiServiceTest, PairsExchangeMessagesBothWays) {
  for (std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20}) {
    auto failures = onEveryProbe<std::string>(probes(), ExchangeCase{bytes});
    for (Rank r = 0; r < 4; ++r) EXPECT_EQ(failures[r], "") << bytes << " bytes, rank " << r;
  }
}

TEST_F(MpiServiceTest, ManyOperationsInFlightAtOnceAllComplete) {
  auto failures = onEveryProbe<std::string>(probes(), FloodCase{300});
  for (Rank r = 0; r < 4; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

TEST_F(MpiServiceTest, CommunicatorsAlongEachDimensionAreRightAndCached) {
  // {2, 2} row-major: rank r sits at (r / 2, r % 2).
  for (std::size_t dim : {0u, 1u}) {
    auto results = onEveryProbe<AlongResult>(probes(), AlongCase{{2, 2}, dim});
    for (Rank r = 0; r < 4; ++r) {
      const AlongResult& got = results[r];
      std::vector<Rank> want = dim == 0 ? std::vector<Rank>{r % 2, r % 2 + 2}
                                        : std::vector<Rank>{r / 2 * 2, r / 2 * 2 + 1};
      EXPECT_EQ(got.members, want) << "dim " << dim << ", rank " << r;
      EXPECT_EQ(got.rank, dim == 0 ? r / 2 : r % 2) << "dim " << dim << ", rank " << r;
      EXPECT_EQ(got.first, got.second) << "the second request made another communicator";
      EXPECT_EQ(got.splitsAfterFirst, got.splitsBefore + 1) << "dim " << dim << ", rank " << r;
      EXPECT_EQ(got.splitsAfterSecond, got.splitsAfterFirst) << "the cached one was split again";
      EXPECT_EQ(got.rankSum, want[0] + want[1]) << "allreduce along dim " << dim;
      EXPECT_NE(got.first, Comm::world().id());
    }
    // Every rank made its communicators in the same order, so they share ids.
    for (Rank r = 1; r < 4; ++r) EXPECT_EQ(results[r].first, results[0].first);
  }
  // Asking again later is still a cache hit: no split anywhere.
  auto again = onEveryProbe<AlongResult>(probes(), AlongCase{{2, 2}, 0});
  for (const auto& got : again) EXPECT_EQ(got.splitsAfterFirst, got.splitsBefore);
  // Typed allreduces along a dimension give each group's own fold.
  std::uint32_t rows = again[0].first;
  auto replies = onEveryProbe<std::vector<double>>(
      probes(), ReduceCase{static_cast<int>(DType::i32), static_cast<int>(ReduceOp::sum), rows});
  for (Rank r = 0; r < 4; ++r) {
    EXPECT_EQ(replies[r], expectedReduce(DType::i32, ReduceOp::sum, again[r].members));
  }
}

TEST_F(MpiServiceTest, CommAlongRejectsAMeshThatIsNotTheWorld) {
  EXPECT_THROW(mpi().commAlong({3, 2}, 0), ConfigError);
  EXPECT_THROW(mpi().commAlong({2, 2}, 2), ConfigError);
}

TEST_F(MpiServiceTest, CallIsServedWhileARecvIsPendingAndMpiRunsOnTheServiceThread) {
  Rank me = ctl.topology().rank;
  std::thread::id service = mpi().threadId();
  ASSERT_NE(service, std::this_thread::get_id());

  std::int64_t got = 0, sent = 4242;
  auto pending = mpi().recv(Comm::world(), me, 99, &got, sizeof got);  // nobody sent yet
  auto completedOn =
      pending.then([](const Future<std::size_t>&) { return std::this_thread::get_id(); });

  std::thread::id callThread;
  auto start = std::chrono::steady_clock::now();
  mpi().call([&] { callThread = std::this_thread::get_id(); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "call() waited for the recv";
  EXPECT_EQ(callThread, service);

  // The generic path: its start and every poll run on the service thread.
  std::atomic<int> polls{0};
  std::thread::id startThread;
  std::atomic<bool> pollsOffThread{false};
  mpi()
      .submit("probe",
              [&]() -> MpiService::Poll {
                startThread = std::this_thread::get_id();
                return [&] {
                  if (std::this_thread::get_id() != service) pollsOffThread = true;
                  return ++polls >= 3;
                };
              },
              {})
      .get(5s);
  EXPECT_EQ(startThread, service);
  EXPECT_FALSE(pollsOffThread);
  EXPECT_EQ(polls.load(), 3);

  EXPECT_FALSE(pending.isReady()) << "the recv completed with nothing sent";
  mpi().send(Comm::world(), me, 99, &sent, sizeof sent).get(5s);
  EXPECT_EQ(pending.get(5s), sizeof got);
  EXPECT_EQ(got, sent);
  // Completed by MPI_Testsome in the loop, so on the service thread.
  EXPECT_EQ(completedOn.get(5s), service);
}

TEST_F(MpiServiceTest, TheLoopSleepsWhenIdleAndBacksOffWhilePolling) {
  long tid = 0;
  mpi().call([&] { tid = ::syscall(SYS_gettid); });
  long ticksPerSecond = ::sysconf(_SC_CLK_TCK);

  long before = threadTicks(tid);
  std::this_thread::sleep_for(1s);
  long idle = threadTicks(tid) - before;
  EXPECT_LE(idle, ticksPerSecond / 50) << "the idle service thread used CPU";  // <= 20 ms of 1 s

  Rank me = ctl.topology().rank;
  std::int64_t got = 0, sent = 1;
  auto pending = mpi().recv(Comm::world(), me, 98, &got, sizeof got);
  before = threadTicks(tid);
  std::this_thread::sleep_for(1s);
  long polling = threadTicks(tid) - before;
  EXPECT_LT(polling, ticksPerSecond / 2) << "polling one recv took over half a core";
  mpi().send(Comm::world(), me, 98, &sent, sizeof sent).get(5s);
  pending.get(5s);
  std::cout << "service thread CPU over 1 s: idle " << idle << " ticks, polling " << polling
            << " ticks (of " << ticksPerSecond << ")" << std::endl;
}

// Bootstrap sets Open MPI's nonblocking allreduce to Rabenseifner's
// algorithm (runtime.cpp), unless the user chose one: ctest runs this once
// as launched and once with OMPI_MCA_coll_libnbc_iallreduce_algorithm=1
// (CROWN_TEST_EXPECT_IALLREDUCE says which to expect).
TEST_F(MpiServiceTest, OpenMpisNonblockingAllreduceIsRabenseifnerUnlessTheUserChose) {
  const char* expected = std::getenv("CROWN_TEST_EXPECT_IALLREDUCE");
  int want = expected ? std::atoi(expected) : 3;
  int algorithm = -1;
  mpi().call([&] {  // MPI_T on the service thread too (THR-1)
    int provided = 0, index = -1, count = 0;
    MPI_T_cvar_handle handle = nullptr;
    ASSERT_EQ(MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided), MPI_SUCCESS);
    ASSERT_EQ(MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index), MPI_SUCCESS);
    ASSERT_EQ(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count), MPI_SUCCESS);
    EXPECT_EQ(MPI_T_cvar_read(handle, &algorithm), MPI_SUCCESS);
    MPI_T_cvar_handle_free(&handle);
    MPI_T_finalize();
  });
  EXPECT_EQ(algorithm, want);
}

TEST_F(MpiServiceTest, ErrorsFailTheirFutureAndTheServiceGoesOn) {
  Rank me = ctl.topology().rank;
  // A message longer than the buffer (between ranks: Open MPI's self path
  // does not check): MPI_ERR_TRUNCATE, as a failed future on rank 1.
  std::vector<ActorRef<MpiProbe>> pair{probes()[0], probes()[1]};
  auto truncated = onEveryProbe<std::string>(pair, TruncateCase{});
  EXPECT_EQ(truncated[0], "");
  EXPECT_EQ(truncated[1], "");
  std::int64_t big[2] = {1, 2};
  // Bad arguments fail at once.
  EXPECT_THROW(mpi().barrier(Comm(12345)).get(1s), ConfigError);
  EXPECT_THROW(mpi().send(Comm::world(), 99, 0, big, 8).get(1s), Error);
  // A generic start that throws fails its own future only.
  EXPECT_THROW(
      mpi()
          .submit("throws", []() -> MpiService::Poll { throw std::runtime_error("no"); }, {})
          .get(5s),
      std::runtime_error);
  EXPECT_GE(mpi().stats().failed, 1u);
  // And the service serves on.
  std::int64_t echo = 0, value = 77;
  auto back = mpi().recv(Comm::world(), me, 96, &echo, sizeof echo);
  mpi().send(Comm::world(), me, 96, &value, sizeof value).get(5s);
  EXPECT_EQ(back.get(5s), sizeof echo);
  EXPECT_EQ(echo, 77);
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
