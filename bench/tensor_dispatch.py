"""tensor_dispatch: 10,000 small elementwise ops recorded inside
procs.activate() and run by the engines of every proc, beside the same ops
in eager torch on one process:
  eager   z = z * 0.5 + 1 on a 16-element tensor, 10,000 times, in plain torch
  crown   the same loop inside procs.activate(): the controller's cost per op
          (recording, amortised: loop time / ops), and per op to completion
          on every proc (loop plus a sync that waits for every engine)
Prints µs per op and the ratios to eager. Goals (issue 11): at most 5 µs
per op at the controller, and to completion within 2x of eager torch.

Run (from the repository root), through crownrun as a user would (it
preloads tcmalloc, and leaves 2 ranks or fewer unbound; --malloc system for
glibc's malloc):
  PYTHONPATH=build/python launch/crownrun -n 4 /usr/bin/python3 bench/tensor_dispatch.py \
    [results dir or file.json]
or with mpirun itself (with 2 ranks or fewer add --bind-to none, or mpirun
binds each rank, its engine and crown's threads to one core):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \
    mpirun --oversubscribe -n 4 -x PYTHONPATH /usr/bin/python3 bench/tensor_dispatch.py
Results: bench/results/tensor_dispatch.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import os
import platform
import statistics
import time

import torch

import crown
from bench_env import allocator, launcher, probe, write_results
from crown.actor import Actor, endpoint

BENCH = "tensor_dispatch"
STEPS = 5000  # two ops per step (mul, add): 10,000 ops
OPS = 2 * STEPS
RUNS = 3


def eager():
    z = torch.ones(16)
    start = time.perf_counter()
    for _ in range(STEPS):
        z = z * 0.5 + 1
    return (time.perf_counter() - start) / OPS


class Probe(Actor):
    @endpoint
    def cpu_s(self):
        return probe()[2]


def cpu_by_rank(probes):
    return list(probes.cpu_s.call().get().values())


def on_mesh(procs, probes):
    """(controller, to completion, every rank's CPU) seconds per op."""
    mesh = procs.tensors()
    with procs.activate():
        z = torch.ones(16)
        for _ in range(100):  # warm-up: the engines' first use, the recording caches
            z = z * 0.5 + 1
    mesh.backend.sync()
    cpu = cpu_by_rank(probes)
    start = time.perf_counter()
    with procs.activate():
        for _ in range(STEPS):
            z = z * 0.5 + 1
        recorded = time.perf_counter()
    mesh.backend.sync()
    done = time.perf_counter()
    cpu = [(after - before) / OPS for after, before in zip(cpu_by_rank(probes), cpu)]
    assert abs(float(crown.inspect(z)[0]) - 2.0) < 1e-3  # the fixed point of z * 0.5 + 1
    return (recorded - start) / OPS, (done - start) / OPS, cpu


def main():
    procs = crown.world()
    eager_t = statistics.median(eager() for _ in range(RUNS))
    probes = procs.spawn("probe", Probe)
    runs = [on_mesh(procs, probes) for _ in range(RUNS)]
    record_t = statistics.median(r[0] for r in runs)
    done_t = statistics.median(r[1] for r in runs)
    cpu = [statistics.median(r[2][rank] for r in runs) for rank in range(len(procs))]
    cores = os.cpu_count() or 1
    cpus = sorted(os.sched_getaffinity(0))
    print(f"{OPS} ops of 16 floats on {len(procs)} procs, median of {RUNS} runs; "
          f"the controller may run on CPUs {cpus} of {cores}; malloc: {allocator()}; "
          f"launcher: {launcher()}")
    if len(cpus) == 1 and cores > 1:
        print("  (bound to one core, which its engine and crown's threads share: mpirun binds "
              "each of 2 ranks or fewer to a core; crownrun and --bind-to none do not)")
    print(f"  eager torch, one process:  {eager_t * 1e6:7.2f} µs/op")
    print(f"  crown, at the controller:  {record_t * 1e6:7.2f} µs/op ({record_t / eager_t:.2f}x eager)")
    print(f"  crown, to completion:      {done_t * 1e6:7.2f} µs/op ({done_t / eager_t:.2f}x eager)")
    # Every rank's CPU per op over the machine's cores bounds the time to
    # completion from below, whatever the overlap.
    floor = sum(cpu) / min(cores, len(procs) + 1)
    print(f"  CPU per op by rank:        " + " ".join(f"{c * 1e6:.2f}" for c in cpu)
          + f" µs (rank 0: controller + engine); all {sum(cpu) * 1e6:.2f} µs")
    print(f"  floor on {cores} core(s):       {floor * 1e6:7.2f} µs/op ({floor / eager_t:.2f}x eager)")
    write_results(BENCH, {"bench": BENCH, "ranks": len(procs), "ops": OPS,
                          "host": platform.node(), "controller_cpus": cpus,
                          "allocator": allocator(), "launcher": launcher(),
                          "load": os.getloadavg()[0], "eager_us": eager_t * 1e6,
                          "controller_us": record_t * 1e6, "completion_us": done_t * 1e6,
                          "cpu_us_by_rank": [c * 1e6 for c in cpu], "cores": cores,
                          "floor_us": floor * 1e6})


crown.run(main)
