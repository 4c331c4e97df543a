"""tensor_step: one training-like step of a 64 MiB allreduce as a program
writes it, beside MPI_Allreduce of the same bytes in the same run (issue 45):
  mpi        mpi4py Allreduce out of place into an array allocated once, and
             in place (before crown starts: crown adopts the MPI that
             mpi4py began)
  crown      r = x.reduce(dims) out of place, then inspect(r[:1]) (the
             controller waits for it): a fresh result each step, whose
             memory the engines must keep; and x.reduce_(dims) in place,
             STEPS recorded, then inspect(x[:1])
Prints ms per step (median of STEPS after two warm-up steps) and each
rank's minor page faults per step in the crown loop; crown/mpi above 1
means crown is faster. Run it under each launcher (bench/launchers.sh):
  bench/launchers.sh bench/tensor_step.py
Results: bench/results/tensor_step.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import os
import platform
import resource
import statistics
import time

import numpy as np
from mpi4py import MPI  # first: crown adopts this MPI

import crown  # as a program does, before torch starts threads
from bench_env import allocator, launcher, write_results

BENCH = "tensor_step"
BYTES = 64 << 20
STEPS = 8
WARMUP = 2  # the first result's memory is still held (by the view inspect read) at the second


def mpi_times():
    comm = MPI.COMM_WORLD
    a = np.ones(BYTES // 4, dtype=np.float32)
    out = np.empty_like(a)
    times = {}
    for name, op in (("oop", lambda: comm.Allreduce(a, out, op=MPI.SUM)),
                     ("inplace", lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM))):
        comm.Barrier()
        each = []
        for i in range(WARMUP + STEPS):
            start = time.perf_counter()
            op()
            if i >= WARMUP:
                each.append(time.perf_counter() - start)
        times[name] = statistics.median(each)
    return times


MPI_TIMES = mpi_times()

import torch  # noqa: E402

from crown.actor import Actor, endpoint  # noqa: E402


class Faults(Actor):
    @endpoint
    def minor(self):
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def crown_times(procs):
    dims = tuple(procs.sizes)
    faults = procs.spawn("faults", Faults)
    with procs.activate():
        x = torch.ones(BYTES // 4)
    each = []
    for i in range(WARMUP + STEPS):
        if i == WARMUP:
            before = faults.minor.call().get().values()
        start = time.perf_counter()
        with procs.activate():
            r = x.reduce(dims)
            crown.inspect(r[:1])
            del r
        if i >= WARMUP:
            each.append(time.perf_counter() - start)
    after = faults.minor.call().get().values()
    start = time.perf_counter()
    with procs.activate():
        for _ in range(STEPS):
            x.reduce_(dims)
        crown.inspect(x[:1])
    inplace = (time.perf_counter() - start) / STEPS
    return ({"oop": statistics.median(each), "inplace": inplace},
            [(b - a) // STEPS for a, b in zip(before, after)])


def main():
    procs = crown.world()
    times, faults = crown_times(procs)
    m_oop, m_in = MPI_TIMES["oop"], MPI_TIMES["inplace"]
    c_oop, c_in = times["oop"], times["inplace"]
    print(f"launcher {launcher()}, allocator {allocator()}, {len(procs)} ranks, 64 MiB float32")
    print(f"  out of place: crown {c_oop * 1e3:.1f} ms, MPI {m_oop * 1e3:.1f} ms, "
          f"crown/mpi {m_oop / c_oop:.2f}x; page faults per step by rank {faults}")
    print(f"  in place:     crown {c_in * 1e3:.1f} ms, MPI {m_in * 1e3:.1f} ms, "
          f"crown/mpi {m_in / c_in:.2f}x")
    write_results(BENCH, {"bench": BENCH, "ranks": len(procs), "host": platform.node(),
                          "launcher": launcher(), "allocator": allocator(),
                          "load": os.getloadavg()[0], "bytes": BYTES, "steps": STEPS,
                          "crown_oop_s": c_oop, "mpi_oop_s": m_oop, "crown_inplace_s": c_in,
                          "mpi_inplace_s": m_in, "faults_per_step": faults})


crown.run(main)
