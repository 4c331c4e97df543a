"""tensor_to_mesh: Tensor.to_mesh between procs (each shard of a mesh of
ranks 0 and 1 copied to the same coordinates of a mesh of ranks 2 and 3)
beside MPI point-to-point called directly (mpi4py), on the same ranks of
one run, 4 KiB to 256 MiB of float32 per shard:
  mpi     mpi4py Send on ranks 0 and 1, Recv on ranks 2 and 3 into one
          buffer (before crown starts: crown adopts the MPI that mpi4py began)
  fresh   the same, each Recv into a newly allocated array, as every move
          makes a new tensor: large ones come from fresh pages that the
          kernel zeroes on first touch
  crown   y = x.to_mesh(bottom) recorded REPEAT times, then a sync that
          waits for every engine of both meshes; per move = elapsed / REPEAT
Prints each one's time per move, the bandwidth per shard, and crown's ratio
to each (anchor time / crown time: above 1 means crown is faster).

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \\
    mpirun --oversubscribe -n 4 -x PYTHONPATH /usr/bin/python3 bench/tensor_to_mesh.py \\
    [results dir or file.json] [largest MiB, else $CROWN_BENCH_LARGEST_MIB, else 256]
Results: bench/results/tensor_to_mesh.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import os
import platform
import sys
import time

import numpy as np
from mpi4py import MPI  # first: crown adopts this MPI

from bench_env import write_results

BENCH = "tensor_to_mesh"
LARGEST = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("CROWN_BENCH_LARGEST_MIB", 256))
SIZES = [s for s in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20)
         if s <= LARGEST << 20]


def repeat(size):
    return 50 if size <= 1 << 20 else (10 if size <= 16 << 20 else 4)


def mpi_times(fresh):
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    out = {}
    for size in SIZES:
        a = np.ones(size // 4, dtype=np.float32)
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(repeat(size) + 1):
            if rank < 2:
                comm.Send(a, dest=rank + 2)
            else:
                if fresh:
                    a = np.empty(size // 4, dtype=np.float32)
                comm.Recv(a, source=rank - 2)
        comm.Barrier()
        out[size] = (time.perf_counter() - start) / (repeat(size) + 1)
    return out


MPI_TIMES, FRESH_TIMES = mpi_times(False), mpi_times(True)

import torch  # noqa: E402

import crown  # noqa: E402


def crown_times(top, bottom):
    source, target = top.tensors(), bottom.tensors()
    out = {}
    for size in SIZES:
        with top.activate():
            x = torch.ones(size // 4)
        y = x.to_mesh(bottom)  # warm-up (and the engines' first use)
        source.backend.sync(), target.backend.sync()
        start = time.perf_counter()
        for _ in range(repeat(size)):
            y = x.to_mesh(bottom)
        source.backend.sync(), target.backend.sync()
        out[size] = (time.perf_counter() - start) / repeat(size)
        assert float(crown.fetch_shard(y, tp=1).get(timeout=60)[0]) == 1.0
        del x, y
    return out


def label(size):
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def main():
    grid = crown.world_flat().split(ranks=(("dp", 2), ("tp", 2)))
    crown_t = crown_times(grid.slice(dp=0), grid.slice(dp=1))
    rows = []
    print(f"{'shard':>8} {'mpi':>10} {'fresh':>10} {'crown':>10} {'mpi GB/s':>9} "
          f"{'crown GB/s':>11} {'crown/mpi':>10} {'crown/fresh':>12}")
    for size in SIZES:
        m, f, c = MPI_TIMES[size], FRESH_TIMES[size], crown_t[size]
        rows.append({"bytes": size, "mpi_s": m, "mpi_fresh_s": f, "crown_s": c,
                     "crown_vs_mpi": m / c, "crown_vs_mpi_fresh": f / c})
        print(f"{label(size):>8} {m * 1e3:8.3f}ms {f * 1e3:8.3f}ms {c * 1e3:8.3f}ms "
              f"{size / m / 1e9:9.2f} {size / c / 1e9:11.2f} {m / c:9.2f}x {f / c:11.2f}x")
    write_results(BENCH, {"bench": BENCH, "ranks": len(grid), "host": platform.node(),
                          "load": os.getloadavg()[0], "rows": rows})



crown.run(main)
