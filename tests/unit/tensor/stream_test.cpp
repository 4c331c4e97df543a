// Engine streams on simulated procs: each stream runs beside the others,
// in its own order; a borrow hands a tensor from one stream to another as
// it is at the borrow, and the lender's commands after the return wait for
// the borrower to be done with it.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "crown/mesh/sim.h"
#include "crown/tensor/kernel.h"
#include "crown/tensor/tensor_mesh.h"

namespace crown::tensor {
namespace {

using namespace std::chrono_literals;

std::atomic<int> g_released{0};

LocalTensor scalar(double value) {
  LocalTensor t = LocalTensor::allocate(ScalarType::f64, {1});
  *t.data<double>() = value;
  return t;
}

const bool kRegistered = [] {
  // Waits (at most 10 s) until test.release has run as often as there are procs.
  registerKernel("test.wait_release", [](KernelContext&, const std::vector<LocalTensor>&) {
    auto until = std::chrono::steady_clock::now() + 10s;
    while (g_released < 4) {
      if (std::chrono::steady_clock::now() > until) throw Error("never released: streams are serial");
      std::this_thread::sleep_for(1ms);
    }
    return std::vector<LocalTensor>{scalar(1)};
  });
  registerKernel("test.release", [](KernelContext&, const std::vector<LocalTensor>&) {
    ++g_released;
    return std::vector<LocalTensor>{scalar(2)};
  });
  // Reads its input after a pause: a lender that did not wait would write first.
  registerKernel("test.slow_copy", [](KernelContext&, const std::vector<LocalTensor>& in) {
    std::this_thread::sleep_for(100ms);
    return std::vector<LocalTensor>{scalar(*in.at(0).data<double>())};
  });
  // Writes 9 into its input, in place (the input is its result).
  registerKernel("test.write_nine", [](KernelContext&, const std::vector<LocalTensor>& in) {
    *in.at(0).data<double>() = 9;
    return std::vector<LocalTensor>{in.at(0)};
  });
  return true;
}();

class StreamTest : public ::testing::Test {
 protected:
  void on(StreamId stream) { tm.client().record(SwitchStream{stream}); }
  RefId call(const std::string& kernel, std::vector<RefId> inputs, RefId result = 0) {
    if (result == 0) result = tm.client().newRef();
    tm.client().record(Call{kernel, Refs(inputs.begin(), inputs.end()), {result},
                            ScalarType::f64, {}, {}, {}, {}});
    return result;
  }
  double value(RefId ref) { return tm.client().fetch(ref, 0).get(10s).item(); }

  mesh::SimulatedWorld sim{4};
  TensorMesh tm{sim.world()};
};

TEST_F(StreamTest, StreamsRunBesideEachOther) {
  g_released = 0;
  on(1);
  RefId waited = call("test.wait_release", {});  // blocks stream 1 until stream 2 runs
  on(2);
  RefId released = call("test.release", {});
  on(0);
  EXPECT_EQ(value(waited), 1.0);
  EXPECT_EQ(value(released), 2.0);
}

TEST_F(StreamTest, ABorrowSeesTheTensorAsLentAndTheLenderWaitsForItsReturn) {
  RefId x = call("ones", {});
  tm.client().record(Call{"fill", {}, {x}, ScalarType::f64, {1}, {1.0}, {}, {}});
  RefId lent = tm.client().newRef();
  on(1);
  tm.client().record(Borrow{7, x, lent, 0, false});
  RefId copy = call("test.slow_copy", {lent});
  tm.client().record(ReturnBorrow{7});
  on(0);
  call("test.write_nine", {x}, x);  // after the return: waits for the slow copy
  EXPECT_EQ(value(copy), 1.0);
  EXPECT_EQ(value(x), 9.0);
  FetchReply gone = tm.client().fetchReply(lent, 0).get(10s);
  EXPECT_FALSE(gone.ok);  // the borrowed ref went with the return
}

TEST_F(StreamTest, AFetchWaitsForEveryStream) {
  on(3);
  RefId slow = call("test.slow_copy", {call("ones", {})});
  on(0);
  EXPECT_EQ(value(slow), 1.0);
  auto stats = tm.client().sync();
  ASSERT_EQ(stats.size(), 4u);
  EXPECT_GE(stats[2].commands, 2u);
}

}  // namespace
}  // namespace crown::tensor
