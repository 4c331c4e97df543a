// RDMA buffers of real GPU memory (issue 12), for a machine with a CUDA
// device (bench/gpu/run_gpu_checks.sh; labelled gpu): rank 1 registers
// device memory, the controller reads it into device and host memory and
// writes it from device memory, bit-exact. Through a pinned mirror unless
// MPI is CUDA-aware (the stats say which). Without a device, it skips,
// saying so.
#include <cuda_runtime_api.h>

#include <crown/cuda/device.h>

#include <vector>

#include "support/mpi_harness.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(code));
}

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<unsigned char> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 131 + seed);
  return out;
}

// One device allocation, freed with its owner.
struct DeviceBytes {
  explicit DeviceBytes(std::size_t bytes) : bytes(bytes) {
    int devices = cuda::deviceCount();
    check(cudaSetDevice(static_cast<int>(Proc::current().rank() % devices)), "cudaSetDevice");
    check(cudaMalloc(&data, bytes), "cudaMalloc");
  }
  ~DeviceBytes() { cudaFree(data); }
  void fill(const std::vector<unsigned char>& host) {
    check(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  std::vector<unsigned char> host() const {
    std::vector<unsigned char> out(bytes);
    check(cudaMemcpy(out.data(), data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return out;
  }
  void* data = nullptr;
  std::size_t bytes = 0;
};

struct Publish {
  std::uint64_t bytes = 0;
  unsigned seed = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& bytes& seed;
  }
};
struct Own {  // the owner's device bytes
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Staged {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

class GpuHolder : public Actor {
 public:
  GpuHolder() {
    handle<Publish>([this](const Publish& p) {
      memory_ = std::make_unique<DeviceBytes>(p.bytes);
      memory_->fill(pattern(p.bytes, p.seed));
      buffer_ = rdma::Buffer::registerMemory(memory_->data, p.bytes);
      return buffer_;
    });
    handle<Own>([this](const Own&) { return memory_->host(); });
    handle<Staged>([](const Staged&) { return rdma::stats(Proc::current()).staged; });
  }
  ~GpuHolder() override {
    if (buffer_.valid()) buffer_.dropBecause("dropped when its owner actor stopped").get(10s);
  }

 private:
  std::unique_ptr<DeviceBytes> memory_;
  rdma::Buffer buffer_;
};

TEST(RdmaGpu, DeviceMemoryIsReadAndWrittenBitExactAcrossRanks) {
  if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  Controller& ctl = *controller();
  ASSERT_GE(ctl.size(), 2u);
  auto holder = ctl.spawn<GpuHolder>(1, "gpu-holder");
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{(64 << 20) + 3}}) {
    auto buffer = holder.call<rdma::Buffer>(Publish{bytes, 7}).get(60s);
    auto cudaAware = rdma::stats(Proc::current()).cudaAwareMpi;
    EXPECT_EQ(holder.call<std::size_t>(Staged{}).get(10s), cudaAware ? 0u : 1u);
    DeviceBytes into(bytes);
    buffer.readInto(into.data, bytes, 60s).get();
    EXPECT_EQ(into.host(), pattern(bytes, 7)) << bytes << " bytes into device memory";
    std::vector<unsigned char> host(bytes);
    buffer.readInto(host.data(), bytes, 60s).get();
    EXPECT_EQ(host, pattern(bytes, 7)) << bytes << " bytes into host memory";
    DeviceBytes from(bytes);
    from.fill(pattern(bytes, 99));
    buffer.writeFrom(from.data, bytes, 60s).get();
    EXPECT_EQ(holder.call<std::vector<unsigned char>>(Own{}).get(60s), pattern(bytes, 99))
        << bytes << " bytes written from device memory";
    buffer.drop().get(10s);
  }
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
