// CUDA's DeviceMemory for RDMA buffers (src/cuda/device_memory.cpp): it is
// registered in every program that links Crown::crown, and without a GPU it
// takes every pointer for host memory, so crown moves it as before. With a
// GPU, device memory is known as such and copies go both ways.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "crown/cuda/device.h"
#include "crown/rdma/device_memory.h"
#include "cuda/cuda_check.h"
#include "cuda/device_memory.h"

namespace crown::cuda {
namespace {

TEST(CudaDeviceMemory, IsRegisteredBeforeMain) {
  auto registered = rdma::deviceMemory();
  ASSERT_NE(registered, nullptr);
  EXPECT_NE(dynamic_cast<CudaDeviceMemory*>(registered.get()), nullptr);
}

TEST(CudaDeviceMemory, HostMemoryIsNotDeviceMemory) {
  std::vector<char> heap(4096, 'a');
  char stack[64] = {};
  EXPECT_FALSE(rdma::isDeviceMemory(heap.data()));
  EXPECT_FALSE(rdma::isDeviceMemory(stack));
  EXPECT_FALSE(rdma::isDeviceMemory(nullptr));
  // copyMemory between host buffers is a plain copy, GPU or not.
  std::vector<char> to(4096, 'b');
  rdma::copyMemory(to.data(), heap.data(), heap.size());
  EXPECT_EQ(to, heap);
}

TEST(CudaDeviceMemory, DeviceMemoryIsKnownAndCopiedBothWays) {
  if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  constexpr std::size_t kBytes = 1 << 20;
  void* device = nullptr;
  CROWN_CHECK_CUDA(cudaMalloc(&device, kBytes));
  CudaDeviceMemory memory;
  EXPECT_TRUE(memory.isDevice(device));
  std::vector<unsigned char> host(kBytes), back(kBytes, 0);
  for (std::size_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 7);
  void* pinned = memory.allocateStaging(kBytes);
  EXPECT_FALSE(memory.isDevice(pinned));
  std::memcpy(pinned, host.data(), kBytes);
  memory.copy(device, pinned, kBytes);
  memory.copy(back.data(), device, kBytes);
  EXPECT_EQ(back, host);
  memory.freeStaging(pinned, kBytes);
  CROWN_CHECK_CUDA(cudaFree(device));
}

}  // namespace
}  // namespace crown::cuda
