// RDMA buffers of GPU memory (issue 12): bandwidth of readInto and writeFrom
// between device memory of rank 0 (the controller) and a device buffer of
// rank 1, 1 MiB to 256 MiB, beside its anchors in the same run:
//   host      the same transfer between host buffers (crown's host path)
//   raw MPI   MPI_Get + MPI_Win_flush of the host buffers on the same window
//   copies    the two device copies a staged read makes (cudaMemcpy device
//             to pinned host, then pinned host to device), no MPI
// Without a CUDA-aware MPI a device buffer is staged through pinned memory
// (docs/rdma.md), so its read costs about host + copies.
//
// Run:  mpirun -n 2 ./rdma_gpu_bench [results dir or file.json]
// (bench/gpu/run_gpu_checks.sh runs it on a GPU machine)
#include <cuda_runtime_api.h>

#include <crown/crown.h>
#include <crown/cuda/device.h>

#include <list>

#include "window_anchor.h"

namespace {

using namespace std::chrono_literals;
using crown::bench::bandwidth;
using crown::bench::fixed;

void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess) throw crown::Error(std::string(what) + ": " + cudaGetErrorString(code));
}

void* deviceAlloc(std::size_t bytes) {
  int devices = crown::cuda::deviceCount();
  check(cudaSetDevice(static_cast<int>(crown::Proc::current().rank() % devices)), "cudaSetDevice");
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  check(cudaMemset(p, 1, bytes), "cudaMemset");
  return p;
}

struct Publish {
  std::uint64_t bytes = 0;
  bool device = false;
  template <class A>
  void serialize(A& a, unsigned) {
    a& bytes& device;
  }
};

class Holder : public crown::Actor {
 public:
  Holder() {
    handle<Publish>([this](const Publish& p) {
      void* memory = nullptr;
      if (p.device) {
        memory = deviceAlloc(p.bytes);
        device_.push_back(memory);
      } else {
        host_.emplace_back(p.bytes, '\1');
        memory = host_.back().data();
      }
      return crown::rdma::Buffer::registerMemory(memory, p.bytes);
    });
  }
  ~Holder() override {
    for (void* p : device_) cudaFree(p);
  }

 private:
  std::vector<void*> device_;
  std::list<std::string> host_;
};

}  // namespace

int main(int argc, char** argv) {
  return crown::run(argc, argv, [&](crown::Controller& ctl) {
    if (ctl.size() < 2) throw crown::ConfigError("rdma_gpu_bench needs 2 ranks");
    if (crown::cuda::deviceCount() == 0) throw crown::ConfigError("rdma_gpu_bench needs a GPU");
    crown::MpiService& mpi = crown::Proc::current().mpi();
    bool window = mpi.nativeWindow() != nullptr;
    auto stats = crown::rdma::stats(crown::Proc::current());
    auto holder = ctl.spawn<Holder>(1, "holder");
    auto results = crown::bench::resultsFile(argc, argv, "rdma_gpu");
    constexpr std::size_t kMax = std::size_t{256} << 20;
    void* localDevice = deviceAlloc(kMax);
    std::string localHost(kMax, '\2');
    void* pinned = nullptr;
    check(cudaHostAlloc(&pinned, kMax, cudaHostAllocPortable), "cudaHostAlloc");

    std::cout << "RDMA of GPU memory, rank 0 <- rank 1 (" << ctl.topology().hostCount
              << " host(s)); " << (window ? "MPI window" : "fabric fallback") << ", MPI "
              << (stats.cudaAwareMpi ? "CUDA-aware (device memory direct)"
                                     : "not CUDA-aware (staged through pinned memory)")
              << "\nGB/s; ratios are device / host\n";
    crown::bench::printRow("size", {"dev read", "dev write", "host read", "raw get", "copies",
                                    "read ratio", "write ratio"});
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t bytes = 1 << 20; bytes <= kMax; bytes *= 4) {
      auto device = holder.call<crown::rdma::Buffer>(Publish{bytes, true}).get(60s);
      auto host = holder.call<crown::rdma::Buffer>(Publish{bytes, false}).get(60s);
      int reps = static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / bytes, 3, 200));
      double devRead = 0, devWrite = 0, hostRead = 0, raw = 0, copies = 0;
      for (int round = 0; round < 3; ++round) {  // alternating; the best round of each
        devRead = std::max(devRead, bandwidth(bytes, reps, [&] {
                             device.readInto(localDevice, bytes, 60s).get();
                           }));
        devWrite = std::max(devWrite, bandwidth(bytes, reps, [&] {
                              device.writeFrom(localDevice, bytes, 60s).get();
                            }));
        hostRead = std::max(hostRead, bandwidth(bytes, reps, [&] {
                              host.readInto(localHost.data(), bytes, 60s).get();
                            }));
        if (window)
          raw = std::max(
              raw, crown::bench::rawMpi(mpi, false, localHost.data(), host.address(), bytes, reps));
        copies = std::max(copies, bandwidth(bytes, reps, [&] {
                            check(cudaMemcpy(pinned, localDevice, bytes, cudaMemcpyDefault), "d2h");
                            check(cudaMemcpy(localDevice, pinned, bytes, cudaMemcpyDefault), "h2d");
                          }));
      }
      crown::bench::printRow(std::to_string(bytes >> 20) + " MiB",
                             {fixed(devRead), fixed(devWrite), fixed(hostRead), fixed(raw),
                              fixed(copies), fixed(crown::bench::ratio(devRead, hostRead)),
                              fixed(crown::bench::ratio(devWrite, hostRead))});
      rows.push_back({{"bytes", bytes},
                      {"device_read_gbps", devRead},
                      {"device_write_gbps", devWrite},
                      {"host_read_gbps", hostRead},
                      {"raw_get_gbps", raw},
                      {"device_copies_gbps", copies}});
      device.drop().get(10s);
      host.drop().get(10s);
    }
    cudaFreeHost(pinned);
    cudaFree(localDevice);
    crown::bench::writeResults(results, {{"bench", "rdma_gpu"},
                                         {"cuda_aware_mpi", stats.cudaAwareMpi},
                                         {"window", window},
                                         {"bandwidth", rows}});
  });
}
