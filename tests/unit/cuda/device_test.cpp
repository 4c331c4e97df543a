// The CUDA and NCCL targets build against the toolkit and behave without a
// GPU (no driver here or in CI): no device is reported, nothing crashes.
#include <gtest/gtest.h>

#include "crown/config.h"
#include "crown/cuda/device.h"
#include "cuda/cuda_check.h"
#if CROWN_WITH_NCCL_ENABLED
#include "crown/cuda/nccl.h"
#include "cuda/nccl_check.h"
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

// A failed call names itself, CUDA's reason and where (no device needed:
// device -1 never exists).
TEST(Cuda, AFailedCallThrowsWithItsNameAndPlace) {
  try {
    CROWN_CHECK_CUDA(cudaSetDevice(-1));
    FAIL() << "cudaSetDevice(-1) succeeded";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("cudaSetDevice(-1) failed: "), std::string::npos) << what;
    EXPECT_NE(what.find("device_test.cpp:"), std::string::npos) << what;
  }
  EXPECT_EQ(deviceCount(), deviceCount());  // and left no sticky error
}

#if CROWN_WITH_NCCL_ENABLED
TEST(Nccl, VersionIsKnown) { EXPECT_GE(ncclVersion(), 20000); }

TEST(Nccl, AFailedCallThrowsWithItsNameAndPlace) {
  try {
    CROWN_CHECK_NCCL(ncclCommCount(nullptr, nullptr));
    FAIL() << "ncclCommCount on a null communicator succeeded";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("ncclCommCount(nullptr, nullptr) failed: "), std::string::npos) << what;
    EXPECT_NE(what.find("device_test.cpp:"), std::string::npos) << what;
  }
}
#endif

}  // namespace
}  // namespace crown::cuda
