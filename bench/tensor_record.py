"""tensor_record: what recording costs at the controller (issue 11's dispatch
benchmark, its controller half). 10,000 small elementwise ops (z = z + 1 on
16 floats) inside activate():
  record       µs per op at the controller, commands recorded onto a
               LocalBackend and not run (the controller's cost alone)
  local_run    µs per op for the same ops run by LocalBackend's 2 simulated
               ranks in this process (a reference executor, not the engine)
and its anchor:
  eager        µs per op for the same ops in eager torch, one process.
Median of 5 runs each. Goal (issue 11): record at most 5 µs per op.

Run (from the repository root; no MPI):
  PYTHONPATH=build/python /usr/bin/python3 bench/tensor_record.py [results dir or file.json]
Results: bench/results/tensor_record.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import json
import os
import platform
import statistics
import sys
import time

import torch

from crown.tensor import LocalBackend, Mesh, inspect

N = 10_000
RUNS = 5


def record_once() -> float:
    mesh = Mesh(LocalBackend({"procs": 2}))
    with mesh.activate():
        z = torch.ones(16)
        for _ in range(100):
            z = z + 1
        t0 = time.perf_counter()
        for _ in range(N):
            z = z + 1
        us = (time.perf_counter() - t0) / N * 1e6
        mesh.backend.pending.clear()
    return us


def local_run_once() -> float:
    mesh = Mesh(LocalBackend({"procs": 2}))
    with mesh.activate():
        z = torch.ones(16)
        mesh.flush()
        t0 = time.perf_counter()
        for _ in range(N):
            z = z + 1
        inspect(z)
        return (time.perf_counter() - t0) / N * 1e6


def eager_once() -> float:
    z = torch.ones(16)
    t0 = time.perf_counter()
    for _ in range(N):
        z = z + 1
    return (time.perf_counter() - t0) / N * 1e6


def main() -> None:
    rows = {}
    for name, fn in (("record", record_once), ("local_run", local_run_once), ("eager", eager_once)):
        runs = [fn() for _ in range(RUNS)]
        rows[name] = {"us_per_op_median": statistics.median(runs), "runs": runs}
    print(f"{'':10} {'µs/op (median of %d)' % RUNS:>22}")
    for name, row in rows.items():
        print(f"{name:10} {row['us_per_op_median']:22.2f}")
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CROWN_BENCH_RESULTS", "bench/results")
    if not out.endswith(".json"):
        os.makedirs(out, exist_ok=True)
        out = os.path.join(out, "tensor_record.json")
    with open(out, "w") as f:
        json.dump({"benchmark": "tensor_record", "ops": N, "torch": torch.__version__,
                   "python": platform.python_version(), "cpus": os.cpu_count(),
                   "load": os.getloadavg()[0], "rows": rows}, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
