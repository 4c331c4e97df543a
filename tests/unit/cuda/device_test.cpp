// The CUDA and NCCL targets build against the toolkit and behave without a
// GPU (no driver here or in CI): no device is reported, nothing crashes.
#include <gtest/gtest.h>

#include "crown/config.h"
#include "crown/cuda/device.h"
#if CROWN_WITH_NCCL_ENABLED
#include "crown/cuda/nccl.h"
#endif

namespace crown::cuda {
namespace {

TEST(Cuda, RuntimeVersionIsKnownWithoutADriver) { EXPECT_GE(runtimeVersion(), 11000); }

TEST(Cuda, DeviceCountIsZeroOrMoreAndNeverFails) {
  int count = deviceCount();
  EXPECT_GE(count, 0);
  EXPECT_EQ(deviceCount(), count);  // a failed probe leaves no sticky error behind
}

TEST(Cuda, ADeviceIsUsableWhenPresent) {
  if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_GT(deviceCount(), 0);
}

#if CROWN_WITH_NCCL_ENABLED
TEST(Nccl, VersionIsKnown) { EXPECT_GE(ncclVersion(), 20000); }
#endif

}  // namespace
}  // namespace crown::cuda
