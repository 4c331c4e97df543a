"""python_spawn: what ProcMesh.spawn returning at once costs and buys
(issue 13). Over a mesh of every rank, in the same run:
  blocking    the old way, kept as _crown.spawn: the call returns once every
              member is constructed; then one call() on the mesh
  at_once     ProcMesh.spawn (returns at once) then one call(), which waits
              for the constructors first: the common case, one mesh at a time
  pipelined   K meshes spawned back to back with ProcMesh.spawn, then one
              call() on each: the constructors of all K overlap
  blocking_k  the same K meshes with _crown.spawn, one after another
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
from crown import _crown, _pickle
from crown.actor import Actor, ActorMesh, endpoint

ROUNDS = 30
K = 8
INIT_MS = float(os.environ.get("SPAWN_INIT_MS", "20"))


class Loaded(Actor):
    def __init__(self, init_ms):
        time.sleep(init_ms / 1000)

    @endpoint
    def ready(self):
        return True


def blocking(procs, name):
    from crown._endpoints import _construct

    payload = _pickle.dumps((_construct, (name, Loaded, INIT_MS), {}))
    local = _crown.spawn(procs.shape, name, payload)
    return ActorMesh(procs.shape, local, Loaded, name)


def timed(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main():
    procs = crown.world_flat()
    results = {"ranks": len(procs), "init_ms": INIT_MS, "k": K, "rounds": ROUNDS}
    samples = {"blocking": [], "at_once": [], "pipelined": [], "blocking_k": []}
    counter = iter(range(10**9))
    for _ in range(ROUNDS):
        meshes = []

        def one_blocking():
            mesh = blocking(procs, f"b{next(counter)}")
            mesh.ready.call().get()
            meshes.append(mesh)

        def one_at_once():
            mesh = procs.spawn(f"a{next(counter)}", Loaded, INIT_MS)
            mesh.ready.call().get()
            meshes.append(mesh)

        def k_pipelined():
            batch = [procs.spawn(f"p{next(counter)}", Loaded, INIT_MS) for _ in range(K)]
            for mesh in batch:
                mesh.ready.call().get()
            meshes.extend(batch)

        def k_blocking():
            batch = [blocking(procs, f"k{next(counter)}") for _ in range(K)]
            for mesh in batch:
                mesh.ready.call().get()
            meshes.extend(batch)

        samples["blocking"].append(timed(one_blocking))
        samples["at_once"].append(timed(one_at_once))
        samples["pipelined"].append(timed(k_pipelined))
        samples["blocking_k"].append(timed(k_blocking))
        for mesh in meshes:
            mesh.stop()
    for name, values in samples.items():
        results[name + "_ms_p50"] = statistics.median(values)
    print(f"spawn + first call over {len(procs)} ranks, __init__ sleeping {INIT_MS} ms, "
          f"{ROUNDS} rounds (p50):")
    print(f"  one mesh:  blocking spawn {results['blocking_ms_p50']:.2f} ms, "
          f"spawn at once {results['at_once_ms_p50']:.2f} ms "
          f"(ratio {results['at_once_ms_p50'] / results['blocking_ms_p50']:.2f})")
    print(f"  {K} meshes:  blocking one after another {results['blocking_k_ms_p50']:.2f} ms, "
          f"pipelined {results['pipelined_ms_p50']:.2f} ms "
          f"(ratio {results['pipelined_ms_p50'] / results['blocking_k_ms_p50']:.2f})")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "python_spawn.json")
    with open(sys.argv[1] if len(sys.argv) > 1 else out, "w") as f:
        json.dump(results, f, indent=2)


crown.run(main)
