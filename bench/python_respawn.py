"""python_respawn: what ProcMesh.respawn_lost() costs (issue 13), beside its
anchor in the same run. Each round SIGKILLs the member at position 1, then:
  respawn     procs.respawn_lost(): MPI_Comm_spawn of this same program, the
              join over the intercommunicator, every live rank admitting it
  first_call  the new mesh's spawn and first call() over all ranks
  raw_spawn   the anchor: mpi4py's MPI.COMM_SELF.Spawn of a Python that only
              imports mpi4py and disconnects (MPI_Init and the interpreter,
              nothing of crown's)
mpi4py is imported first, so crown adopts its MPI and the anchor uses the
same one.

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_orte_enable_recovery=1 \\
    PYTHONPATH=build/python mpirun --oversubscribe -n 4 -x PYTHONPATH \\
    -x OMPI_MCA_orte_enable_recovery /usr/bin/python3 bench/python_respawn.py
Results: bench/results/python_respawn.json.
"""

from mpi4py import MPI  # noqa: I001 - first: crown adopts this MPI

import json
import os
import signal
import statistics
import sys
import time

import crown
import crown.actor
from crown.actor import Actor, SupervisionError, endpoint

ROUNDS = int(os.environ.get("RESPAWN_ROUNDS", "3"))  # CROWN_SPARE_RANKS (default 4) bounds it
ANCHOR_CHILD = "from mpi4py import MPI; MPI.Comm.Get_parent().Disconnect()"


class Member(Actor):
    @endpoint
    def ready(self):
        return os.getpid()

    @endpoint
    def die(self):
        os.kill(os.getpid(), signal.SIGKILL)


def ms(start):
    return (time.perf_counter() - start) * 1000


def main():
    crown.actor.unhandled_fault_hook = lambda failure: None  # the kills are on purpose
    procs = crown.world_flat()
    samples = {"respawn": [], "first_call": [], "raw_spawn": []}
    for round_ in range(ROUNDS):
        members = procs.spawn(f"members{round_}", Member)
        members.ready.call().get(timeout=30)
        try:
            members.slice(ranks=1).die.call_one().get(timeout=30)
        except SupervisionError:
            pass
        start = time.perf_counter()
        procs = procs.respawn_lost()
        samples["respawn"].append(ms(start))
        start = time.perf_counter()
        procs.spawn(f"fresh{round_}", Member).ready.call().get(timeout=30)
        samples["first_call"].append(ms(start))
        start = time.perf_counter()
        child = MPI.COMM_SELF.Spawn(sys.executable, ["-c", ANCHOR_CHILD], maxprocs=1)
        child.Disconnect()
        samples["raw_spawn"].append(ms(start))
    results = {"ranks": len(procs), "rounds": ROUNDS, "mesh": procs.shape.ranks()}
    for name, values in samples.items():
        results[name + "_ms_p50"] = statistics.median(values)
        results[name + "_ms"] = values
    ratio = results["respawn_ms_p50"] / results["raw_spawn_ms_p50"]
    print(f"respawn_lost over {len(procs)} ranks, {ROUNDS} rounds (p50): respawn "
          f"{results['respawn_ms_p50']:.0f} ms, then spawn + first call "
          f"{results['first_call_ms_p50']:.0f} ms; raw MPI_Comm_spawn of a bare mpi4py "
          f"{results['raw_spawn_ms_p50']:.0f} ms (ratio {ratio:.2f})", flush=True)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "python_respawn.json")
    with open(sys.argv[1] if len(sys.argv) > 1 else out, "w") as f:
        json.dump(results, f, indent=2)


crown.run(main)
