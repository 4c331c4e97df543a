// gpu_allreduce: allreduce of CUDA tensors through the C++ TensorMesh API
// (NCCL), 4 KiB .. 256 MiB of float32 per rank, beside the same allreduce of
// CPU tensors (MPI) on the same ranks, and the copy of a device shard to the
// host (cuda.to_host, what a fetch does). Run with one rank per GPU:
//
//   mpirun -n <GPUs> build/bench/gpu_allreduce [--max-mib 256] [--iters 20]
//
// On one GPU that is one rank: NCCL takes no two ranks on one device, so the
// collective is a group of one, and what it measures is crown's path around
// NCCL (dispatch, the members' agreement, the stream wait), not a network.
// Each figure is the mean over `iters` commands recorded in one batch and
// closed by one sync, per command. Prints a table; writes
// bench/results/gpu_allreduce.json (or under $CROWN_BENCH_RESULTS: the
// arguments are options here, not a results path). Skips, saying so,
// without a GPU.
#include <crown/crown.h>
#include <crown/cuda/device.h>
#include <crown/tensor/tensor_mesh.h>

#include <cstring>

#include "bench_util.h"

using namespace crown;
using namespace crown::tensor;
using crown::bench::Clock;

namespace {

struct Options {
  std::int64_t maxMib = 256;
  int iters = 20;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--max-mib")) o.maxMib = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters")) o.iters = std::atoi(argv[++i]);
  }
  return o;
}

// Seconds per command of `record` (which records one command), over `iters`
// commands in one batch, after one untimed warm-up.
template <class Fn>
double perCommand(TensorMesh& tm, int iters, Fn record) {
  record();
  tm.sync();
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) record();
  tm.sync();
  return crown::bench::secondsSince(start) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse(argc, argv);
  return crown::run(argc, argv, [&](Controller& ctl) {
    int devices = cuda::deviceCount();
    if (devices == 0 || static_cast<Rank>(devices) < ctl.size()) {
      std::cout << "gpu_allreduce: skipped: " << ctl.size() << " rank(s), " << devices
                << " CUDA device(s) here (one per rank needed)\n";
      return;
    }
    TensorMesh tm(ctl.world());
    std::vector<std::string> all = tm.shape().labels();
    nlohmann::json rows = nlohmann::json::array();
    std::printf("%d rank(s), one GPU each; float32; mean of %d commands per size\n",
                static_cast<int>(ctl.size()), options.iters);
    std::printf("%10s %14s %12s %14s %12s %14s\n", "bytes", "nccl us", "nccl GB/s", "mpi(cpu) us",
                "mpi GB/s", "to_host GB/s");
    for (std::int64_t bytes = 4096; bytes <= options.maxMib * 1024 * 1024; bytes *= 4) {
      std::int64_t n = bytes / 4;
      DTensor host = tm.ones({n});
      DTensor gpu = tm.call("cuda.to_device", {host}, {{{n}, ScalarType::f32}})[0];
      // Fewer commands for the big sizes: each allocates its result.
      int iters = bytes >= (64 << 20) ? std::max(3, options.iters / 4) : options.iters;
      double nccl = perCommand(tm, iters, [&] { (void)gpu.reduce(all); });
      double mpi = perCommand(tm, iters, [&] { (void)host.reduce(all); });
      double toHost = perCommand(tm, iters, [&] {
        (void)tm.call("cuda.to_host", {gpu}, {{{n}, ScalarType::f32}});
      });
      // Check once that the device result is right (a sum of ones).
      double expect = static_cast<double>(ctl.size());
      double got = gpu.reduce(all).fetch().get().data<float>()[n - 1];
      if (got != expect) throw Error("allreduce gave " + std::to_string(got));
      auto gbs = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
      std::printf("%10lld %14.1f %12.2f %14.1f %12.2f %14.2f\n", static_cast<long long>(bytes),
                  nccl * 1e6, gbs(nccl), mpi * 1e6, gbs(mpi), gbs(toHost));
      rows.push_back({{"bytes", bytes}, {"nccl_us", nccl * 1e6}, {"mpi_cpu_us", mpi * 1e6},
                      {"to_host_gbs", gbs(toHost)}});
    }
    crown::bench::writeResults(crown::bench::resultsFile(0, argv, "gpu_allreduce"),
                               {{"ranks", ctl.size()}, {"devices", devices}, {"rows", rows}});
  });
}
