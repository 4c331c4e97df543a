// What both RDMA benches measure crown against: raw MPI_Get/MPI_Put +
// MPI_Win_flush on the world's window, run and timed inside the MPI service
// thread (no crown code at all), and the bandwidth of a repeated operation.
// Rank 1 is the target.
#pragma once

#include <mpi.h>

#include <crown/crown.h>

#include "../bench_util.h"

namespace crown::bench {

// GB/s of `reps` runs of `one` after a warm-up run.
template <class Fn>
double bandwidth(std::size_t bytes, int reps, Fn one) {
  one();
  auto start = Clock::now();
  for (int i = 0; i < reps; ++i) one();
  return static_cast<double>(bytes) * reps / secondsSince(start) / 1e9;
}

// Raw MPI on the service thread: `reps` MPI_Get/Put + flush of rank 1's
// memory at `address`, timed there; GB/s.
inline double rawMpi(MpiService& mpi, bool put, void* local, std::uint64_t address,
                     std::size_t bytes, int reps) {
  double seconds = 0;
  mpi.call([&] {
    MPI_Win win = *static_cast<const MPI_Win*>(mpi.nativeWindow());
    int n = static_cast<int>(bytes);
    auto one = [&] {
      if (put) {
        MPI_Put(local, n, MPI_BYTE, 1, static_cast<MPI_Aint>(address), n, MPI_BYTE, win);
      } else {
        MPI_Get(local, n, MPI_BYTE, 1, static_cast<MPI_Aint>(address), n, MPI_BYTE, win);
      }
      MPI_Win_flush(1, win);
    };
    one();
    auto start = Clock::now();
    for (int i = 0; i < reps; ++i) one();
    seconds = secondsSince(start);
  });
  return static_cast<double>(bytes) * reps / seconds / 1e9;
}

}  // namespace crown::bench
