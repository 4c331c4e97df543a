"""console_rerun: rerunning a script inside a served job (issue 15) beside
its anchor, a fresh launch, in the same run:
  fresh     `crownrun -n N python3 script.py`: MPI's launch, crown's
            bootstrap, imports on every rank, the script, the shutdown
  rerun     `crown console --run script.py` against `crownrun -n N --serve`:
            the script alone, in the live job (its first run in the job is
            given apart: it imports what the served job had not yet)
for two scripts: "actors" spawns an actor mesh and calls it; "tensors"
imports torch and runs a matmul on every rank's shard (procs.activate()),
then fetches a reduction.

Run (from the repository root, after launch/build; not under mpirun):
  PYTHONPATH=build/python /usr/bin/python3 bench/console_rerun.py [RANKS...]
Results: bench/results/console_rerun.json, and a table on stdout.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CROWNRUN = os.path.join(HERE, "..", "launch", "crownrun")
PYTHON = "/usr/bin/python3"
ROUNDS = 5

SCRIPTS = {
    "actors": """\
import crown
from crown.actor import Actor, endpoint

class Square(Actor):
    @endpoint
    def of(self, x):
        return x * x

def main():
    squares = crown.world().spawn("squares", Square)
    assert sorted(squares.of.call(3).get().values()) == [9] * crown.world().size()
crown.run(main)
""",
    "tensors": """\
import torch, crown

def main():
    with crown.world().activate():
        x = torch.ones(256, 256)
        total = (x @ x).sum().reduce("procs", reduction="sum")
        assert float(crown.inspect(total)) > 0
crown.run(main)
""",
}


def timed(command, env) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, timeout=300)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr}")
    return took


def served(ranks: int, env) -> subprocess.Popen:
    job = subprocess.Popen([CROWNRUN, "-n", str(ranks), "--serve"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in job.stdout:
        if "crown: serving" in line:
            return job
    raise SystemExit(f"crownrun --serve -n {ranks} ended before serving")


def main() -> None:
    ranks_list = [int(arg) for arg in sys.argv[1:]] or [4, 8]
    work = tempfile.mkdtemp(prefix="crown-console-bench-")
    os.chmod(work, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=work)
    results = {"rounds": ROUNDS, "runs": []}
    print(f"{'ranks':>5} {'script':<8} {'fresh s':>8} {'first s':>8} {'rerun s':>8} "
          f"{'fresh/rerun':>11}")
    for ranks in ranks_list:
        job = served(ranks, env)
        try:
            for name, source in SCRIPTS.items():
                script = os.path.join(work, f"{name}.py")
                with open(script, "w") as f:
                    f.write(source)
                console = [PYTHON, "-m", "crown", "console", "--run", script]
                first = timed(console, env)
                rerun = statistics.median(timed(console, env) for _ in range(ROUNDS))
                fresh = statistics.median(timed([CROWNRUN, "-n", str(ranks), PYTHON, script], env)
                                          for _ in range(ROUNDS))
                results["runs"].append({"ranks": ranks, "script": name, "fresh_s": fresh,
                                        "first_s": first, "rerun_s": rerun,
                                        "fresh_over_rerun": fresh / rerun})
                print(f"{ranks:>5} {name:<8} {fresh:>8.3f} {first:>8.3f} {rerun:>8.3f} "
                      f"{fresh / rerun:>10.1f}x", flush=True)
        finally:
            subprocess.run([PYTHON, "-m", "crown", "stop"], env=env, timeout=120,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            job.wait(timeout=120)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "console_rerun.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
