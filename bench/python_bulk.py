"""python_bulk: a large numpy array's round trip through a Python actor, beside
MPI_Send/MPI_Recv of the same bytes between the same two ranks, in one run:
  crown   Echo actor on rank 1; echo.echo.call_one(array).get() returns the
          array it was sent (64 MiB of float64 each way)
  mpi     mpi4py Send then Recv of the same buffer between ranks 0 and 1
          (before crown starts: crown adopts the MPI that mpi4py began)
Prints each one's median round trip and bandwidth (2 x bytes / round trip),
and crown's share of MPI's bandwidth. Goal (issue 9): crown at least 0.5x MPI.

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \
    mpirun --oversubscribe -n 2 -x PYTHONPATH /usr/bin/python3 bench/python_bulk.py \
    [results dir or file.json] [MiB]
Results: bench/results/python_bulk.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import platform
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI  # first: crown adopts this MPI and leaves finalising to it

BENCH = "python_bulk"
MIB = int(sys.argv[2]) if len(sys.argv) > 2 else 64
REPEAT = 12
WARMUP = 2


def mpi_round_trips(array):
    comm = MPI.COMM_WORLD
    times = []
    comm.Barrier()
    for i in range(WARMUP + REPEAT):
        start = time.perf_counter()
        if comm.rank == 0:
            comm.Send(array, dest=1)
            comm.Recv(array, source=1)
        elif comm.rank == 1:
            comm.Recv(array, source=0)
            comm.Send(array, dest=0)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    comm.Barrier()
    return times


ARRAY = np.ones(MIB * (1 << 20) // 8)
MPI_TIMES = mpi_round_trips(ARRAY)

import crown  # noqa: E402: after the MPI anchor, which must not share MPI with crown's thread
from bench_env import write_results  # noqa: E402
from crown.actor import Actor, endpoint  # noqa: E402


class Echo(Actor):
    @endpoint
    def echo(self, array):
        return array


def summary(times):
    median = statistics.median(times)
    return {"median_ms": median * 1e3, "min_ms": min(times) * 1e3,
            "gbytes_per_s": 2 * ARRAY.nbytes / median / 1e9}


def main():
    procs = crown.world_flat()
    echo = procs.slice(ranks=1).spawn("echo", Echo)
    times = []
    for i in range(WARMUP + REPEAT):
        start = time.perf_counter()
        back = echo.echo.call_one(ARRAY).get(120)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    assert back.shape == ARRAY.shape and back[12345] == 1.0
    result = {"bench": BENCH, "bytes": ARRAY.nbytes, "repeat": REPEAT,
              "host": platform.node(), "crown": summary(times), "mpi": summary(MPI_TIMES)}
    result["crown_over_mpi_bandwidth"] = (result["crown"]["gbytes_per_s"] /
                                          result["mpi"]["gbytes_per_s"])
    for name in ("crown", "mpi"):
        s = result[name]
        print(f"{name:6s} {MIB} MiB round trip: median {s['median_ms']:8.2f} ms  "
              f"min {s['min_ms']:8.2f} ms  {s['gbytes_per_s']:6.2f} GB/s")
    print(f"crown / mpi bandwidth: {result['crown_over_mpi_bandwidth']:.2f}x (goal >= 0.5x)")
    write_results(BENCH, result)


crown.run(main)
