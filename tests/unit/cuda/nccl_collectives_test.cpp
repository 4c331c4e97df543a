// NCCL's collectives for CUDA tensors, as far as a machine without a GPU
// can see them: the element type and reduction mappings, the registration
// that linking Crown::crown brings (this binary names nothing of
// nccl_registrar.cpp), and clear errors (no crash) from a device tensor's
// collective or copy to the host when there is no device. With a GPU, the
// same calls run for real on one rank (NCCL takes one device per rank;
// tests/mpi/nccl_test.cpp runs several ranks).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "crown/cuda/device.h"
#include "crown/cuda/nccl.h"
#include "crown/mesh/sim.h"
#include "crown/tensor/device_collectives.h"
#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"
#include "cuda/nccl_collectives.h"
#include "cuda/nccl_wait.h"

namespace crown::cuda {
namespace {

using namespace std::chrono_literals;
using namespace crown::tensor;

TEST(NcclMapping, EveryTypeNcclHasMapsAndTheOthersDoNot) {
  EXPECT_EQ(detail::ncclType(ScalarType::f16), ncclFloat16);
  EXPECT_EQ(detail::ncclType(ScalarType::bf16), ncclBfloat16);
  EXPECT_EQ(detail::ncclType(ScalarType::f32), ncclFloat32);
  EXPECT_EQ(detail::ncclType(ScalarType::f64), ncclFloat64);
  EXPECT_EQ(detail::ncclType(ScalarType::i8), ncclInt8);
  EXPECT_EQ(detail::ncclType(ScalarType::u8), ncclUint8);
  EXPECT_EQ(detail::ncclType(ScalarType::i32), ncclInt32);
  EXPECT_EQ(detail::ncclType(ScalarType::i64), ncclInt64);
  EXPECT_EQ(detail::ncclType(ScalarType::boolean), std::nullopt);
  EXPECT_EQ(detail::ncclType(ScalarType::i16), std::nullopt);
}

TEST(NcclMapping, ReductionsMapAndAvgIsNativeFrom2_10) {
  using R = detail::NcclReduction;
  const int now = NCCL_VERSION_CODE;
  EXPECT_EQ(detail::ncclReduction(Reduction::sum, now), (R{ncclSum, false}));
  EXPECT_EQ(detail::ncclReduction(Reduction::min, now), (R{ncclMin, false}));
  EXPECT_EQ(detail::ncclReduction(Reduction::max, now), (R{ncclMax, false}));
  EXPECT_EQ(detail::ncclReduction(Reduction::product, now), (R{ncclProd, false}));
  EXPECT_EQ(detail::ncclReduction(Reduction::avg, NCCL_VERSION(2, 10, 0)), (R{ncclAvg, false}));
  EXPECT_EQ(detail::ncclReduction(Reduction::avg, ncclVersion()), (R{ncclAvg, false}));
  // An older library (or one that cannot say its version): sum, then divide.
  EXPECT_EQ(detail::ncclReduction(Reduction::avg, NCCL_VERSION(2, 9, 9)), (R{ncclSum, true}));
  EXPECT_EQ(detail::ncclReduction(Reduction::avg, 0), (R{ncclSum, true}));
}

TEST(NcclMapping, ResultShapes) {
  using K = CollectiveKind;
  std::vector<std::int64_t> s{8, 3};
  EXPECT_EQ(detail::resultShape(K::allreduce, s, 4), s);
  EXPECT_EQ(detail::resultShape(K::broadcast, s, 4), s);
  EXPECT_EQ(detail::resultShape(K::alltoall, s, 4), s);
  EXPECT_EQ(detail::resultShape(K::reduceScatter, s, 4), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(detail::resultShape(K::allgather, s, 4), (std::vector<std::int64_t>{4, 8, 3}));
  EXPECT_THROW(detail::resultShape(K::reduceScatter, {6}, 4), Error);
}

// Linking Crown::crown is enough: nothing here names the registrar.
TEST(NcclRegistration, LinkingCrownRegistersNcclForCudaTensors) {
  auto found = findDeviceCollectives(DeviceKind::cuda);
  ASSERT_NE(found, nullptr);
  EXPECT_NE(dynamic_cast<NcclCollectives*>(found.get()), nullptr);
  EXPECT_TRUE(findKernel("cuda.to_device"));
  EXPECT_TRUE(findKernel("cuda.to_host"));
  EXPECT_EQ(findDeviceCollectives(DeviceKind::cpu), nullptr);
}

// A CPU tensor labelled as on cuda:0, its memory the host's: what a device
// shard looks like to code that never dereferences it.
LocalTensor labelledCuda(const LocalTensor& host) {
  return LocalTensor::wrap(host.dtype(), host.shape(), host.strides(), host.data(), host.owner(),
                           Device{DeviceKind::cuda, 0});
}

// The MPI service of a group of one member, which never needs it.
struct NoMpi final : MpiService {
  [[noreturn]] static void refuse() { throw Error("no MPI in this test"); }
  void call(std::function<void()>) override { refuse(); }
  Future<void> submit(std::string, Start, std::vector<Rank>) override { refuse(); }
  Future<void> send(Comm, Rank, int, const void*, std::size_t) override { refuse(); }
  Future<std::size_t> recv(Comm, Rank, int, void*, std::size_t) override { refuse(); }
  Future<void> broadcast(Comm, void*, std::size_t, Rank) override { refuse(); }
  Future<void> allreduce(Comm, void*, std::size_t, DType, ReduceOp) override { refuse(); }
  Future<void> barrier(Comm) override { refuse(); }
  Future<void> allgather(Comm, const void*, void*, std::size_t) override { refuse(); }
  Future<void> reduceScatter(Comm, const void*, void*, std::size_t, DType, ReduceOp) override {
    refuse();
  }
  Future<void> alltoall(Comm, const void*, void*, std::size_t) override { refuse(); }
  Comm commOver(const std::vector<std::size_t>&, const std::vector<std::size_t>&,
                std::uint32_t) override {
    refuse();
  }
  Comm commOfRanks(const std::vector<Rank>&, std::uint32_t) override { refuse(); }
  Rank commRank(Comm) const override { return 0; }
  std::vector<Rank> commMembers(Comm) const override { return {0}; }
  const void* nativeComm(Comm) const override { refuse(); }
  void abandonPeer(Rank, std::string) override {}
  std::thread::id threadId() const override { return {}; }
  Stats stats() const override { return {}; }
};

std::string messageOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no crown::Error)";
}

// The wait for a collective's stream (nccl_wait.h), with stand-ins for the
// stream, NCCL's error and crown's liveness: no GPU needed.
struct FakeCollective {
  std::vector<Rank> members{0, 1, 2, 3};
  std::atomic<bool> finished{false};
  std::atomic<bool> rank2Lost{false};
  std::atomic<bool> ncclError{false};
  std::atomic<int> aborts{0};
  detail::CollectiveWait waitFor() {
    return detail::CollectiveWait{
        .finished = [this] { return finished.load(); },
        .failure = [this]() -> std::string { return ncclError ? "unhandled system error" : ""; },
        .members = members,
        .alive = [this](Rank r) { return !(r == 2 && rank2Lost); },
        .abort = [this] { ++aborts; },
        .liveEvery = std::chrono::microseconds(200),
    };
  }
};

// Sets `flag` after `delay`, on a thread of its own, while the wait polls.
std::thread setAfter(std::atomic<bool>& flag, std::chrono::milliseconds delay) {
  return std::thread([&flag, delay] {
    std::this_thread::sleep_for(delay);
    flag = true;
  });
}

// A member that dies inside the collective: NCCL never says so (its kernels
// spin), crown's failure detection does, and the wait aborts and names it.
TEST(NcclWait, AMemberCrownLosesEndsTheWaitWithProcessLostAndAnAbort) {
  FakeCollective c;
  std::thread killer = setAfter(c.rank2Lost, 30ms);
  auto start = std::chrono::steady_clock::now();
  try {
    detail::awaitCollective(c.waitFor(), "NCCL allreduce");
    ADD_FAILURE() << "the wait ended as if the collective had finished";
  } catch (const ProcessLost& e) {
    EXPECT_EQ(e.rank(), 2u);
    EXPECT_NE(std::string(e.what()).find("lost during NCCL allreduce"), std::string::npos)
        << e.what();
  }
  killer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(c.aborts, 1);
}

TEST(NcclWait, AnErrorNcclReportsEndsTheWaitWithItsTextAndAnAbort) {
  FakeCollective c;
  std::thread failer = setAfter(c.ncclError, 10ms);
  std::string why = messageOf([&] { detail::awaitCollective(c.waitFor(), "NCCL broadcast"); });
  failer.join();
  EXPECT_EQ(why, "NCCL broadcast failed: unhandled system error");
  EXPECT_EQ(c.aborts, 1);
}

TEST(NcclWait, AFinishedCollectiveReturnsWithNoAbort) {
  FakeCollective c;
  std::thread finisher = setAfter(c.finished, 5ms);
  detail::awaitCollective(c.waitFor(), "NCCL allgather");
  finisher.join();
  EXPECT_EQ(c.aborts, 0);
}

class NcclWithoutGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (deviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device; NcclOnOneGpu runs";
  }
  NcclCollectives nccl;
  NoMpi mpi;
  std::vector<Rank> members{0};
};

TEST_F(NcclWithoutGpu, ToHostFailsSayingThereIsNoDevice) {
  auto t = labelledCuda(LocalTensor::zeros(ScalarType::f32, {4}));
  std::string why = messageOf([&] { nccl.toHost(t); });
  EXPECT_NE(why.find("float32[4] is on cuda:0, and this machine has no CUDA device"),
            std::string::npos)
      << why;
}

TEST_F(NcclWithoutGpu, RunFailsSayingThereIsNoDeviceForEveryCollective) {
  auto t = labelledCuda(LocalTensor::zeros(ScalarType::f32, {4}));
  for (auto kind :
       {CollectiveKind::allreduce, CollectiveKind::reduceScatter, CollectiveKind::allgather,
        CollectiveKind::alltoall, CollectiveKind::broadcast}) {
    Collective command;
    command.kind = kind;
    command.source = 1;
    command.result = 2;
    std::string why = messageOf([&] {
      nccl.run(command, CollectiveGroup{mpi, Comm(3), members, 0}, t);
    });
    EXPECT_NE(why.find(std::string("NCCL ") + collectiveName(kind)), std::string::npos) << why;
    EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  }
}

TEST_F(NcclWithoutGpu, ToDeviceFailsSayingThereIsNoDevice) {
  std::string why =
      messageOf([] { detail::toDevice(LocalTensor::zeros(ScalarType::f64, {2}), 0); });
  EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
}

// Through the engine (simulated procs): the device's errors poison the
// result or fail the fetch, and the engine serves on.
TEST_F(NcclWithoutGpu, TheEngineReportsTheMissingDeviceAndServesOn) {
  mesh::SimulatedWorld sim{2, {{"procs", 2}}};
  TensorMesh tm{sim.world(), 1};
  auto x = tm.ones({3});
  auto onGpu = tm.call("cuda.to_device", {x}, {{{3}, ScalarType::f32}})[0];
  try {
    onGpu.fetch().get(10s);
    ADD_FAILURE() << "a device copy without a device was fetched";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  registerKernel("test.label_cuda", [](KernelContext&, const std::vector<LocalTensor>& in) {
    return std::vector<LocalTensor>{labelledCuda(in.at(0).contiguousCopy())};
  });
  auto labelled = tm.call("test.label_cuda", {x}, {{{3}, ScalarType::f32}})[0];
  try {
    labelled.fetch().get(10s);
    ADD_FAILURE() << "a cuda:0 tensor was copied to the host without a device";
  } catch (const RemoteError& e) {
    EXPECT_NE(std::string(e.what()).find("this machine has no CUDA device"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(x.sum().fetch().get(10s).item(), 3.0);
}

// With a device: one rank's group, for real.
class NcclOnOneGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
  LocalTensor run(CollectiveKind kind, Reduction reduction, const LocalTensor& input) {
    Collective command;
    command.kind = kind;
    command.reduction = reduction;
    command.source = 1;
    command.result = 2;
    return nccl.run(command, CollectiveGroup{mpi, Comm(5), members, 0}, input);
  }
  NcclCollectives nccl;
  NoMpi mpi;
  std::vector<Rank> members{0};
};

TEST_F(NcclOnOneGpu, ToDeviceAndBackKeepsTheValues) {
  auto host = LocalTensor::allocate(ScalarType::f64, {5});
  for (int i = 0; i < 5; ++i) host.data<double>()[i] = i * 1.5;
  auto back = nccl.toHost(detail::toDevice(host, 0));
  ASSERT_EQ(back.device().kind, DeviceKind::cpu);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back.data<double>()[i], i * 1.5);
}

TEST_F(NcclOnOneGpu, EveryCollectiveOfOneMemberIsItsInput) {
  auto host = LocalTensor::allocate(ScalarType::f32, {4, 2});
  for (int i = 0; i < 8; ++i) host.data<float>()[i] = static_cast<float>(i + 1);
  auto onGpu = detail::toDevice(host, 0);
  for (auto kind :
       {CollectiveKind::allreduce, CollectiveKind::reduceScatter, CollectiveKind::allgather,
        CollectiveKind::alltoall, CollectiveKind::broadcast}) {
    for (auto reduction : {Reduction::sum, Reduction::avg, Reduction::max}) {
      auto out = run(kind, reduction, onGpu);
      EXPECT_EQ(out.device().kind, DeviceKind::cuda);
      auto back = nccl.toHost(out);
      ASSERT_EQ(back.numel(), 8) << collectiveName(kind);
      for (int i = 0; i < 8; ++i)
        EXPECT_EQ(back.data<float>()[i], i + 1.0f) << collectiveName(kind);
    }
  }
  EXPECT_EQ(run(CollectiveKind::allgather, Reduction::sum, onGpu).shape(),
            (std::vector<std::int64_t>{1, 4, 2}));
}

TEST_F(NcclOnOneGpu, ABoolTensorIsRefusedForAReductionButMovesAsBytes) {
  auto onGpu = detail::toDevice(LocalTensor::zeros(ScalarType::boolean, {4}), 0);
  std::string why = messageOf([&] { run(CollectiveKind::allreduce, Reduction::sum, onGpu); });
  EXPECT_NE(why.find("NCCL has no bool type"), std::string::npos) << why;
  EXPECT_EQ(run(CollectiveKind::allgather, Reduction::sum, onGpu).shape(),
            (std::vector<std::int64_t>{1, 4}));
}

}  // namespace
}  // namespace crown::cuda
