"""python_spawn: what ProcMesh.spawn returning at once, with each member's
__init__ in its own first turn (issue 47), buys (issue 13). Over a mesh of
every rank, in the same run:
  one         ProcMesh.spawn then one call(), which waits behind the
              constructors: the common case, one mesh at a time
  serial_k    K meshes one after another: spawn, call, then the next (what
              a program that waits for each mesh gets; the anchor)
  pipelined   the same K meshes spawned back to back, then one call() on
              each: their constructors overlap, across ranks and within one
Each mesh is stopped after (not timed). The actor's __init__ sleeps
INIT_MS, a stand-in for loading a model, so overlap shows.

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \\
    mpirun --oversubscribe -n 4 -x PYTHONPATH /usr/bin/python3 bench/python_spawn.py
Results: bench/results/python_spawn.json.
"""

import json
import os
import statistics
import sys
import time

import crown
from crown.actor import Actor, endpoint

ROUNDS = 30
K = 8
INIT_MS = float(os.environ.get("SPAWN_INIT_MS", "20"))


class Loaded(Actor):
    def __init__(self, init_ms):
        time.sleep(init_ms / 1000)

    @endpoint
    def ready(self):
        return True


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main():
    procs = crown.world_flat()
    results = {"ranks": len(procs), "init_ms": INIT_MS, "k": K, "rounds": ROUNDS}
    samples = {"one": [], "serial_k": [], "pipelined": []}
    counter = iter(range(10**9))
    for _ in range(ROUNDS):
        meshes = []

        def one_at_a_time():
            mesh = procs.spawn(f"a{next(counter)}", Loaded, INIT_MS)
            mesh.ready.call().get()
            meshes.append(mesh)

        def k_serial():
            for _ in range(K):
                one_at_a_time()

        def k_pipelined():
            batch = [procs.spawn(f"p{next(counter)}", Loaded, INIT_MS) for _ in range(K)]
            for mesh in batch:
                mesh.ready.call().get()
            meshes.extend(batch)

        samples["one"].append(timed(one_at_a_time))
        samples["serial_k"].append(timed(k_serial))
        samples["pipelined"].append(timed(k_pipelined))
        for mesh in meshes:
            mesh.stop()
    for name, values in samples.items():
        results[name + "_ms_p50"] = statistics.median(values)
    print(f"spawn + first call over {len(procs)} ranks, __init__ sleeping {INIT_MS} ms, "
          f"{ROUNDS} rounds (p50):")
    print(f"  one mesh: {results['one_ms_p50']:.2f} ms")
    print(f"  {K} meshes: one after another {results['serial_k_ms_p50']:.2f} ms, "
          f"pipelined {results['pipelined_ms_p50']:.2f} ms "
          f"(ratio {results['pipelined_ms_p50'] / results['serial_k_ms_p50']:.2f})")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "python_spawn.json")
    with open(sys.argv[1] if len(sys.argv) > 1 else out, "w") as f:
        json.dump(results, f, indent=2)


crown.run(main)
