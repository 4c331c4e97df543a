// Distributed CUDA tensors over NCCL on real ranks (mpirun -n N, one GPU per
// rank): each rank's shard goes to its device (cuda.to_device), then
// allreduce (every reduction), allgather, reduceScatter and broadcast run
// over the whole mesh through NCCL, and the fetched results (copied to the
// host by NcclCollectives::toHost) are checked against a reference computed
// here. Skips, saying so, without a CUDA device, or with fewer devices than
// ranks (NCCL does not take two ranks on one device); without a device, the
// members' agreement before NCCL is tested instead.
#include <cmath>

#include "crown/cuda/device.h"
#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"
#include "support/mpi_harness.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;
using namespace crown::tensor;

constexpr std::int64_t kBlock = 4;

// Rank r holds r * 100 + i + 1 at index i, as float32 on the host (every
// sum and product here stays exact). Registered on every rank, before main.
const bool kRegistered = [] {
  registerKernel("test.rank_values", [](KernelContext& c, const std::vector<LocalTensor>&) {
    LocalTensor t = LocalTensor::allocate(ScalarType::f32, c.call.ints);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = static_cast<float>(c.rank * 100.0 + static_cast<double>(i) + 1);
    return std::vector<LocalTensor>{t};
  });
  // A CPU shard labelled as on cuda:0 (NcclWithoutDevice: never dereferenced there).
  registerKernel("test.label_cuda", [](KernelContext&, const std::vector<LocalTensor>& in) {
    LocalTensor t = in.at(0).contiguousCopy();
    return std::vector<LocalTensor>{LocalTensor::wrap(t.dtype(), t.shape(), t.strides(), t.data(),
                                                      t.owner(), Device{DeviceKind::cuda, 0})};
  });
  return true;
}();

std::vector<double> values(const LocalTensor& t) {
  EXPECT_EQ(t.dtype(), ScalarType::f32);
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

class NcclTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int devices = cuda::deviceCount();
    ranks_ = controller()->size();
    if (devices == 0) {
      skip_ = "no CUDA device on this machine: the NCCL tests need one GPU per rank";
    } else if (static_cast<std::size_t>(devices) < ranks_) {
      skip_ = std::to_string(ranks_) + " ranks and " + std::to_string(devices) +
              " CUDA device(s): NCCL needs one device per rank (run with -n " +
              std::to_string(devices) + ")";
    } else {
      mesh_ = std::make_unique<TensorMesh>(controller()->world());
    }
  }
  static void TearDownTestSuite() { mesh_.reset(); }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  static TensorMesh& tm() { return *mesh_; }
  // Every label of the world mesh ({hosts, procs}): a group of every rank.
  static std::vector<std::string> all() { return tm().shape().labels(); }
  static DTensor onDevice(std::vector<std::int64_t> shape) {
    auto host = tm().call("test.rank_values", {}, {{shape, ScalarType::f32}}, shape)[0];
    return tm().call("cuda.to_device", {host}, {{shape, ScalarType::f32}})[0];
  }
  static std::map<std::string, std::size_t> coordsOf(std::size_t rank) {
    return tm().shape().coordinates(rank);
  }
  static double valueOf(std::size_t rank, std::int64_t i) { return rank * 100.0 + i + 1; }

  static inline std::unique_ptr<TensorMesh> mesh_;
  static inline std::string skip_;
  static inline std::size_t ranks_ = 0;
};

TEST_F(NcclTest, AllreduceOfEveryReductionOverEveryRank) {
  auto x = onDevice({kBlock});
  for (auto reduction : {Reduction::sum, Reduction::avg, Reduction::min, Reduction::max,
                         Reduction::product}) {
    auto reduced = x.reduce(all(), reduction);
    for (std::size_t r = 0; r < ranks_; ++r) {
      auto got = values(reduced.fetch(coordsOf(r)).get(60s));
      ASSERT_EQ(got.size(), static_cast<std::size_t>(kBlock));
      for (std::int64_t i = 0; i < kBlock; ++i) {
        double want = valueOf(0, i);
        for (std::size_t m = 1; m < ranks_; ++m) {
          double v = valueOf(m, i);
          switch (reduction) {
            case Reduction::sum:
            case Reduction::avg: want += v; break;
            case Reduction::min: want = std::min(want, v); break;
            case Reduction::max: want = std::max(want, v); break;
            case Reduction::product: want *= v; break;
          }
        }
        if (reduction == Reduction::avg) want /= static_cast<double>(ranks_);
        EXPECT_NEAR(got[i], want, std::abs(want) * 1e-5)  // float32, in NCCL's order
            << reductionName(reduction) << " on rank " << r << " at " << i;
      }
    }
  }
}

TEST_F(NcclTest, AllgatherStacksEveryRanksShard) {
  auto stacked = onDevice({kBlock}).allgather(all());
  auto got = stacked.fetch(coordsOf(ranks_ - 1)).get(60s);
  ASSERT_EQ(got.shape(), (std::vector<std::int64_t>{static_cast<std::int64_t>(ranks_), kBlock}));
  auto v = values(got);
  for (std::size_t m = 0; m < ranks_; ++m)
    for (std::int64_t i = 0; i < kBlock; ++i) EXPECT_EQ(v[m * kBlock + i], valueOf(m, i));
}

TEST_F(NcclTest, ReduceScatterAndBroadcast) {
  auto n = static_cast<std::int64_t>(ranks_);
  auto x = onDevice({n * kBlock});
  auto scattered = x.reduceScatter(all());
  auto fromLast = x.broadcast(all(), n - 1);
  for (std::size_t r = 0; r < ranks_; ++r) {
    auto mine = values(scattered.fetch(coordsOf(r)).get(60s));
    ASSERT_EQ(mine.size(), static_cast<std::size_t>(kBlock));
    for (std::int64_t i = 0; i < kBlock; ++i) {
      double want = 0;
      for (std::size_t m = 0; m < ranks_; ++m) want += valueOf(m, r * kBlock + i);
      EXPECT_EQ(mine[i], want) << "block of rank " << r;
    }
    auto root = values(fromLast.fetch(coordsOf(r)).get(60s));
    for (std::int64_t i = 0; i < n * kBlock; ++i) EXPECT_EQ(root[i], valueOf(ranks_ - 1, i));
  }
}

// Without a device (this runs where the others skip, under -n 2 too): a
// shard labelled as on cuda:0 fails NcclCollectives' local checks on every
// member; they agree on it over MPI, so each fails saying why and nobody
// waits in NCCL, and the engines serve on.
TEST(NcclWithoutDevice, EveryMemberFailsSayingSoAndTheEnginesServeOn) {
  if (cuda::deviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device (NcclTest runs)";
  TensorMesh tm(controller()->world());
  auto labels = tm.shape().labels();
  auto host = tm.ones({kBlock});
  auto labelled = tm.call("test.label_cuda", {host}, {{{kBlock}, ScalarType::f32}})[0];
  auto reduced = labelled.reduce(labels);
  for (std::size_t r = 0; r < controller()->size(); ++r) {
    try {
      reduced.fetch(tm.shape().coordinates(r)).get(60s);
      ADD_FAILURE() << "rank " << r << " reduced a device tensor without a device";
    } catch (const RemoteError& e) {
      EXPECT_NE(std::string(e.what()).find("NCCL allreduce: float32[4] is on cuda:0, and this "
                                           "machine has no CUDA device"),
                std::string::npos)
          << e.what();
    }
  }
  auto total = host.reduce(labels).fetch().get(60s);  // over MPI, as ever
  EXPECT_EQ(values(total)[0], static_cast<double>(controller()->size()));
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
