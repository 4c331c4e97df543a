// Distributed tensors on real ranks (mpirun -n 4) over a {dp: 2, tp: 2}
// mesh: every collective and reduction over each dimension and over both,
// against a reference computed here from what each rank holds; deferred
// errors through a collective (a failure on one rank poisons the result on
// every member, names the rank, and later collectives still run); inputs
// that differ across ranks; in-place reduction.
#include <unistd.h>

#include <cmath>

#include "crown/tensor/device_collectives.h"
#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"
#include "support/mpi_harness.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;
using namespace crown::tensor;

constexpr std::int64_t kBlock = 3;  // elements per member block

// Rank r holds r * 100 + i + 1 at index i (float64: every sum and product
// here stays exact). ints = shape; the length can grow with the rank
// (reals[0] elements more per rank) to make inputs that differ.
// A stand-in GPU for the device seam: its "device memory" is host memory,
// its allreduce goes over the group's MPI communicator, and it counts its
// calls, so the test sees the engine hand device shards to it.
struct FakeGpu final : DeviceCollectives {
  LocalTensor run(const Collective& command, const CollectiveGroup& group,
                  const LocalTensor& input) override {
    ++runs;
    CROWN_CHECK(command.kind == CollectiveKind::allreduce, "the fake GPU only allreduces");
    LocalTensor out = LocalTensor::allocate(input.dtype(), input.shape());
    out.assign(onCpu(input).contiguousCopy());
    group.mpi.allreduce(group.comm, out.data(), out.numel(), DType::f64, ReduceOp::sum).get();
    return onGpu(out);
  }
  LocalTensor toHost(const LocalTensor& tensor) override { return onCpu(tensor); }
  static LocalTensor onGpu(const LocalTensor& t) {
    return LocalTensor::wrap(t.dtype(), t.shape(), t.strides(), t.data(), t.owner(),
                             Device{DeviceKind::cuda, 0});
  }
  static LocalTensor onCpu(const LocalTensor& t) {
    return LocalTensor::wrap(t.dtype(), t.shape(), t.strides(), t.data(), t.owner());
  }
  std::atomic<int> runs{0};
};

std::shared_ptr<FakeGpu> fakeGpu() {
  static auto fake = std::make_shared<FakeGpu>();
  return fake;
}

const bool kRegistered = [] {
  registerDeviceCollectives(DeviceKind::cuda, fakeGpu());  // on every rank, before any engine
  registerKernel("test.rank_values", [](KernelContext& c, const std::vector<LocalTensor>&) {
    auto shape = c.call.ints;
    if (!c.call.reals.empty()) shape[0] += static_cast<std::int64_t>(c.call.reals[0]) * c.rank;
    LocalTensor t = LocalTensor::allocate(ScalarType::f64, shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = c.rank * 100.0 + i + 1;
    return std::vector<LocalTensor>{t};
  });
  registerKernel("test.to_fake_gpu", [](KernelContext&, const std::vector<LocalTensor>& in) {
    return std::vector<LocalTensor>{FakeGpu::onGpu(in.at(0).contiguousCopy())};
  });
  registerKernel("test.fails_on_rank", [](KernelContext& c, const std::vector<LocalTensor>&) {
    if (c.rank == static_cast<Rank>(c.call.ints.at(0))) throw Error("no data on this rank");
    return std::vector<LocalTensor>{LocalTensor::zeros(ScalarType::f64, {4})};
  });
  return true;
}();

std::vector<double> valuesOf(Rank rank, std::int64_t count) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < count; ++i) v.push_back(rank * 100.0 + i + 1);
  return v;
}

std::vector<double> values(const LocalTensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

// The members of rank r's group over `dims` of {dp: 2, tp: 2}, in order.
std::vector<Rank> groupOf(Rank r, const std::vector<std::string>& dims) {
  bool overDp = std::find(dims.begin(), dims.end(), "dp") != dims.end();
  bool overTp = std::find(dims.begin(), dims.end(), "tp") != dims.end();
  std::vector<Rank> members;
  for (Rank dp = 0; dp < 2; ++dp)
    for (Rank tp = 0; tp < 2; ++tp)
      if ((overDp || dp == r / 2) && (overTp || tp == r % 2)) members.push_back(dp * 2 + tp);
  return members;
}

double fold(Reduction reduction, const std::vector<double>& xs) {
  double acc = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) {
    switch (reduction) {
      case Reduction::sum:
      case Reduction::avg: acc += xs[i]; break;
      case Reduction::min: acc = std::min(acc, xs[i]); break;
      case Reduction::max: acc = std::max(acc, xs[i]); break;
      case Reduction::product: acc *= xs[i]; break;
    }
  }
  return reduction == Reduction::avg ? acc / static_cast<double>(xs.size()) : acc;
}

std::map<std::string, std::size_t> coordsOf(Rank r) { return {{"dp", r / 2}, {"tp", r % 2}}; }

const std::vector<std::vector<std::string>> kDimSets = {{"dp"}, {"tp"}, {"dp", "tp"}};
const Reduction kReductions[] = {Reduction::sum, Reduction::avg, Reduction::min, Reduction::max,
                                 Reduction::product};

class TensorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    mesh_ = std::make_unique<TensorMesh>(ProcMesh(mesh::Shape({{"dp", 2}, {"tp", 2}})));
  }
  static void TearDownTestSuite() { mesh_.reset(); }  // while the runtime is up
  static TensorMesh& tm() { return *mesh_; }
  static inline std::unique_ptr<TensorMesh> mesh_;
  static DTensor rankValues(std::vector<std::int64_t> shape) {
    return tm().call("test.rank_values", {}, {{shape, ScalarType::f64}}, shape)[0];
  }
};

TEST_F(TensorTest, AllreduceOfEveryReductionOverEachDimensionAndBoth) {
  auto x = rankValues({kBlock});
  for (const auto& dims : kDimSets) {
    for (Reduction reduction : kReductions) {
      auto reduced = x.reduce(dims, reduction);
      for (Rank r = 0; r < 4; ++r) {
        std::vector<double> want;
        for (std::int64_t i = 0; i < kBlock; ++i) {
          std::vector<double> xs;
          for (Rank m : groupOf(r, dims)) xs.push_back(valuesOf(m, kBlock)[i]);
          want.push_back(fold(reduction, xs));
        }
        EXPECT_EQ(values(reduced.fetch(coordsOf(r)).get(30s)), want)
            << reductionName(reduction) << " over " << dims.size() << " dims, rank " << r;
      }
    }
  }
}

TEST_F(TensorTest, ReduceScatterGivesEachMemberItsBlockOfTheReduction) {
  for (const auto& dims : kDimSets) {
    std::int64_t members = static_cast<std::int64_t>(groupOf(0, dims).size());
    auto x = rankValues({members * kBlock});
    for (Reduction reduction : {Reduction::sum, Reduction::max}) {
      auto scattered = x.reduceScatter(dims, reduction);
      for (Rank r = 0; r < 4; ++r) {
        auto group = groupOf(r, dims);
        auto index = static_cast<std::int64_t>(std::find(group.begin(), group.end(), r) - group.begin());
        std::vector<double> want;
        for (std::int64_t i = 0; i < kBlock; ++i) {
          std::vector<double> xs;
          for (Rank m : group) xs.push_back(valuesOf(m, members * kBlock)[index * kBlock + i]);
          want.push_back(fold(reduction, xs));
        }
        EXPECT_EQ(values(scattered.fetch(coordsOf(r)).get(30s)), want) << "rank " << r;
      }
    }
  }
}

TEST_F(TensorTest, AllgatherStacksEveryMembersShardInOrder) {
  auto x = rankValues({kBlock});
  for (const auto& dims : kDimSets) {
    auto stacked = x.allgather(dims);
    for (Rank r = 0; r < 4; ++r) {
      std::vector<double> want;
      for (Rank m : groupOf(r, dims)) {
        auto v = valuesOf(m, kBlock);
        want.insert(want.end(), v.begin(), v.end());
      }
      LocalTensor got = stacked.fetch(coordsOf(r)).get(30s);
      EXPECT_EQ(got.shape(), (std::vector<std::int64_t>{static_cast<std::int64_t>(groupOf(r, dims).size()), kBlock}));
      EXPECT_EQ(values(got), want) << "rank " << r;
    }
  }
}

TEST_F(TensorTest, AllToAllSendsBlockJToMemberJ) {
  for (const auto& dims : kDimSets) {
    std::int64_t members = static_cast<std::int64_t>(groupOf(0, dims).size());
    auto x = rankValues({members * kBlock});
    auto exchanged = x.alltoall(dims);
    for (Rank r = 0; r < 4; ++r) {
      auto group = groupOf(r, dims);
      auto index = std::find(group.begin(), group.end(), r) - group.begin();
      std::vector<double> want;
      for (Rank m : group) {
        auto v = valuesOf(m, members * kBlock);
        want.insert(want.end(), v.begin() + index * kBlock, v.begin() + (index + 1) * kBlock);
      }
      EXPECT_EQ(values(exchanged.fetch(coordsOf(r)).get(30s)), want) << "rank " << r;
    }
  }
}

TEST_F(TensorTest, BroadcastCopiesTheRootMembersShard) {
  auto x = rankValues({kBlock});
  for (const auto& dims : kDimSets) {
    auto copied = x.broadcast(dims, 1);
    for (Rank r = 0; r < 4; ++r)
      EXPECT_EQ(values(copied.fetch(coordsOf(r)).get(30s)), valuesOf(groupOf(r, dims)[1], kBlock));
  }
}

TEST_F(TensorTest, ReducingInPlaceChangesTheSourceRef) {
  auto x = rankValues({kBlock});
  tm().client().record(Collective{CollectiveKind::allreduce, Reduction::sum, {"tp"}, x.ref(),
                                  x.ref(), 0, "tensor_test.cpp"});
  EXPECT_EQ(values(x.fetch(coordsOf(2)).get(30s)),
            (std::vector<double>{201 + 301, 202 + 302, 203 + 303}));
}

TEST_F(TensorTest, AFailureOnOneRankPoisonsTheCollectiveEverywhereAndNamesIt) {
  auto broken = tm().call("test.fails_on_rank", {}, {{{4}, ScalarType::f64}}, {3})[0];
  auto sum = broken.reduce(std::vector<std::string>{"dp", "tp"});
  for (Rank r = 0; r < 4; ++r) {
    try {
      sum.fetch(coordsOf(r)).get(30s);
      ADD_FAILURE() << "a poisoned allreduce succeeded on rank " << r;
    } catch (const RemoteError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
      EXPECT_NE(what.find("no data on this rank"), std::string::npos) << what;
    }
  }
  // Nobody is left waiting: the next collective runs.
  auto fine = rankValues({1}).reduce("tp");
  EXPECT_EQ(values(fine.fetch(coordsOf(0)).get(30s)), (std::vector<double>{1 + 101}));
}

TEST_F(TensorTest, InputsThatDifferAcrossRanksPoisonTheResult) {
  auto uneven = tm().call("test.rank_values", {}, {{{2}, ScalarType::f64}}, {2}, {1.0})[0];
  try {
    uneven.reduce("dp").fetch(coordsOf(0)).get(30s);
    ADD_FAILURE() << "inputs of 2 and 4 elements were reduced";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("inputs differ"), std::string::npos) << e.what();
  }
  // With the recorded shape given (as the Python front end does), the data
  // moves during the agreement and each member checks its input against it.
  Collective overlapped{CollectiveKind::allreduce, Reduction::sum, {"dp"}, uneven.ref(), 0, 0, {}};
  overlapped.expected = true;
  overlapped.expectShape = {2};
  overlapped.expectType = ScalarType::f64;
  overlapped.result = tm().client().newRef();
  tm().client().record(overlapped);
  auto failed = tm().client().fetch(overlapped.result, 0);
  try {
    failed.get(30s);
    ADD_FAILURE() << "inputs of 2 and 4 elements were reduced during the agreement";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("recorded as"), std::string::npos) << e.what();
  }
  EXPECT_EQ(values(rankValues({1}).reduce("tp").fetch(coordsOf(0)).get(30s)),
            (std::vector<double>{1 + 101}));  // and the next one runs
}

TEST_F(TensorTest, AMeshOfPartOfTheLaunchRunsItsCollectivesOverItsMembers) {
  TensorMesh row(ProcMesh(mesh::Shape({{"dp", 2}, {"tp", 2}}).at("dp", 1)));  // ranks 2 and 3
  auto x = row.call("test.rank_values", {}, {{{kBlock}, ScalarType::f64}}, {kBlock})[0];
  auto sum = x.reduce("tp");
  EXPECT_EQ(values(sum.fetch({{"tp", 0}}).get(30s)),
            (std::vector<double>{201 + 301, 202 + 302, 203 + 303}));
  auto stacked = x.allgather({"tp"}).fetch({{"tp", 1}}).get(30s);
  EXPECT_EQ(stacked.shape(), (std::vector<std::int64_t>{2, kBlock}));
}

TEST_F(TensorTest, ToMeshMovesShardsBetweenProcsByCoordinatesAndCopiesAlongNewDims) {
  mesh::Shape grid({{"dp", 2}, {"tp", 2}});
  TensorMesh top(ProcMesh(grid.at("dp", 0))), bottom(ProcMesh(grid.at("dp", 1)));
  auto x = top.call("test.rank_values", {}, {{{kBlock}, ScalarType::f64}}, {kBlock})[0];
  auto moved = x.toMesh(bottom);  // rank 0 -> 2 and 1 -> 3, over MPI
  EXPECT_EQ(values(moved.fetch({{"tp", 1}}).get(30s)), valuesOf(1, kBlock));
  EXPECT_EQ(values(moved.reduce("tp").fetch({{"tp", 0}}).get(30s)),
            (std::vector<double>{1 + 101, 2 + 102, 3 + 103}));
  auto everywhere = x.toMesh(tm());  // the grid has tp and dp: a copy on both rows
  for (Rank r = 0; r < 4; ++r) {
    EXPECT_EQ(values(everywhere.fetch(coordsOf(r)).get(30s)), valuesOf(r % 2, kBlock)) << r;
  }
  // A failed source: its failure, not data, on the far side.
  auto broken = top.call("test.fails_on_rank", {}, {{{4}, ScalarType::f64}}, {1})[0].toMesh(bottom);
  try {
    broken.fetch({{"tp", 1}}).get(30s);
    ADD_FAILURE() << "the failure on rank 1 did not reach rank 3";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("no data on this rank"), std::string::npos) << e.what();
  }
  EXPECT_EQ(values(broken.fetch({{"tp", 0}}).get(30s)), std::vector<double>(4, 0.0));
}

TEST_F(TensorTest, DeviceShardsGoToTheDevicesCollectivesAndComeBackToTheHostToBeFetched) {
  int before = fakeGpu()->runs;
  auto x = rankValues({kBlock});
  auto onGpu = tm().call("test.to_fake_gpu", {x}, {{{kBlock}, ScalarType::f64}})[0];
  auto sum = onGpu.reduce("tp");
  EXPECT_EQ(values(sum.fetch(coordsOf(1)).get(30s)), (std::vector<double>{1 + 101, 2 + 102, 3 + 103}));
  EXPECT_EQ(fakeGpu()->runs, before + 1);  // rank 0's engine handed its shard to the device
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
