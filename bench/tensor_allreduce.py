"""tensor_allreduce: crown's tensor allreduce (Tensor.reduce_ over every proc)
beside MPI_Allreduce called directly (mpi4py) and torch.distributed's gloo
all_reduce, on the same ranks of one run, 4 KiB to 256 MiB of float32:
  mpi     mpi4py Allreduce in place of a numpy array (before crown starts:
          crown adopts the MPI that mpi4py began)
  mpi-nb  mpi4py Iallreduce then Wait: MPI's nonblocking collective, which is
          what crown's MPI service thread runs (THR-1: it never blocks in MPI)
  gloo    torch.distributed all_reduce (gloo over TCP loopback), then the
          process group is destroyed
  crown   inside procs.activate(): x.reduce_(dims) recorded REPEAT times,
          then a sync that waits for every engine; per op = elapsed / REPEAT
  mpi-oop mpi4py Allreduce out of place, into an array allocated once
  crown-oop  r = x.reduce(dims) out of place, then inspect(r[:1]) (the
          controller waits for it), REPEAT times: a fresh result every step,
          whose memory the engines must keep (issue 45)
Prints each one's time per allreduce and crown's ratio to each (anchor time
/ crown time: above 1 means crown is faster). Goals (issue 11): at least
0.9x MPI from 1 MiB up, and faster than gloo; out of place (issue 45): at
least 0.9x mpi-oop at 64 MiB under plain mpirun. The JSON records the
launcher and the allocator (bench_env.py): run it under each
(bench/launchers.sh).

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \
    mpirun --oversubscribe -n 4 -x PYTHONPATH /usr/bin/python3 bench/tensor_allreduce.py \
    [results dir or file.json] [largest MiB, else $CROWN_BENCH_LARGEST_MIB, else 256]
Results: bench/results/tensor_allreduce.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import os
import platform
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI  # first: crown adopts this MPI

import crown  # before the anchors: importing it sets malloc as crown's ranks run it
from bench_env import allocator, launcher, write_results

BENCH = "tensor_allreduce"
LARGEST = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("CROWN_BENCH_LARGEST_MIB", 256))
SIZES = [s for s in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20)
         if s <= LARGEST << 20]


def repeat(size):
    return 50 if size <= 1 << 20 else (10 if size <= 16 << 20 else 4)


def timed(op, size, warmups=1):
    for _ in range(warmups):
        op()
    start = time.perf_counter()
    for _ in range(repeat(size)):
        op()
    return (time.perf_counter() - start) / repeat(size)


def mpi_times(nonblocking):
    comm = MPI.COMM_WORLD
    out = {}
    for size in SIZES:
        a = np.ones(size // 4, dtype=np.float32)
        comm.Barrier()
        if nonblocking == "oop":
            result = np.empty_like(a)
            out[size] = timed(lambda: comm.Allreduce(a, result, op=MPI.SUM), size)
        elif nonblocking:
            out[size] = timed(lambda: comm.Iallreduce(MPI.IN_PLACE, a, op=MPI.SUM).Wait(), size)
        else:
            out[size] = timed(lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), size)
    return out


def gloo_times():
    import torch
    import torch.distributed as dist
    comm = MPI.COMM_WORLD
    port = comm.bcast(29500 + os.getpid() % 1000 if comm.rank == 0 else None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    out = {}
    for size in SIZES:
        t = torch.ones(size // 4)
        dist.barrier()
        out[size] = timed(lambda: dist.all_reduce(t), size)
    dist.destroy_process_group()
    return out


MPI_TIMES = mpi_times(nonblocking=False)
MPI_NB_TIMES = mpi_times(nonblocking=True)
MPI_OOP_TIMES = mpi_times(nonblocking="oop")
GLOO_TIMES = gloo_times()

import torch  # noqa: E402


def crown_times(procs):
    dims = tuple(procs.sizes)
    mesh = procs.tensors()
    out = {}
    for size in SIZES:
        with procs.activate():
            x = torch.ones(size // 4)
            x.reduce_(dims)  # warm-up (and the engines' first use)
        mesh.backend.sync()
        start = time.perf_counter()
        with procs.activate():
            for _ in range(repeat(size)):
                x.reduce_(dims)
        mesh.backend.sync()
        out[size] = (time.perf_counter() - start) / repeat(size)
        del x
    return out


def crown_oop_times(procs):
    dims = tuple(procs.sizes)
    out = {}
    for size in SIZES:
        with procs.activate():
            x = torch.ones(size // 4)

        def step():
            with procs.activate():
                r = x.reduce(dims)
                crown.inspect(r[:1])

        # Two warm-ups: the first result's memory is still held (by the view
        # inspect read) when the second is made; from the third on the
        # engines reuse their memory, the steady state measured here.
        out[size] = timed(step, size, warmups=2)
        del x
    return out


def label(size):
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def main():
    procs = crown.world()
    crown_t = crown_times(procs)
    crown_oop = crown_oop_times(procs)
    rows = []
    print(f"launcher {launcher()}, allocator {allocator()}")
    print(f"{'size':>8} {'mpi':>10} {'mpi-nb':>10} {'gloo':>10} {'crown':>10} {'crown/mpi':>10}"
          f" {'crown/mpi-nb':>13} {'crown/gloo':>11} {'mpi-oop':>10} {'crown-oop':>10}"
          f" {'oop/mpi-oop':>12}")
    for size in SIZES:
        m, nb, g, c = MPI_TIMES[size], MPI_NB_TIMES[size], GLOO_TIMES[size], crown_t[size]
        mo, co = MPI_OOP_TIMES[size], crown_oop[size]
        rows.append({"bytes": size, "mpi_s": m, "mpi_nonblocking_s": nb, "gloo_s": g,
                     "crown_s": c, "crown_vs_mpi": m / c, "crown_vs_mpi_nonblocking": nb / c,
                     "crown_vs_gloo": g / c, "mpi_oop_s": mo, "crown_oop_s": co,
                     "crown_oop_vs_mpi_oop": mo / co})
        print(f"{label(size):>8} {m * 1e3:8.3f}ms {nb * 1e3:8.3f}ms {g * 1e3:8.3f}ms "
              f"{c * 1e3:8.3f}ms {m / c:9.2f}x {nb / c:12.2f}x {g / c:10.2f}x "
              f"{mo * 1e3:8.3f}ms {co * 1e3:8.3f}ms {mo / co:11.2f}x")
    write_results(BENCH, {"bench": BENCH, "ranks": len(procs), "host": platform.node(),
                          "launcher": launcher(), "allocator": allocator(),
                          "load": os.getloadavg()[0], "rows": rows})


crown.run(main)
