"""attach_start: a client attaching to a served job (issue 46), timed from
outside, beside the other ways a program gets 4 ranks' first replies. One
served job (``crownrun -n 4 --serve``) lives through the run; the variants
alternate, round after round, each a fresh ``python3``:
  attach     crown.attach() to the served job, one actor on each of its 4
             ranks (attachment.procs), call().get() from all, detach: what
             a restarted notebook pays to drive a job that outlived it
  plain 4    bench/python_start_prog.py started by no launcher: it becomes
             the controller and spawn_procs starts 4 new processes
  mpirun 4   ``mpirun -n 4`` of bench/python_start_prog.py: a fresh launch
  dask       the anchor for attach: a Dask cluster (a scheduler and 4
             single-threaded worker processes) lives through the run too, and
             a fresh python3 connects a Client to it and runs a function on
             every worker (Client.run), then closes
The time is from just before the process starts to its line with every
reply (the wall clock, time.time(), on both sides).

Run (from the repository root, after launch/build; not under mpirun):
  PYTHONPATH=build/python /usr/bin/python3 bench/attach_start.py
Environment: ATTACH_START_ROUNDS (default 5). As root it sets
OMPI_ALLOW_RUN_AS_ROOT for mpirun.
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROG = os.path.join(HERE, "python_start_prog.py")
PYTHON = "/usr/bin/python3"
ROUNDS = int(os.environ.get("ATTACH_START_ROUNDS", "5"))

CLIENT = """\
import time, json
begin = time.time()
import crown
from crown.actor import Actor, endpoint

class Member(Actor):
    @endpoint
    def ping(self):
        return 1

attachment = crown.attach()
attached = time.time()
members = attachment.procs.spawn("member", Member)
assert sum(members.ping.call().get().values()) == 4
replied = time.time()
members.stop()
crown.detach()
print("attach_start: " + json.dumps({"begin": begin, "attached": attached, "replied": replied}))
"""


DASK_CLIENT = """\
import time, json, sys
begin = time.time()
from dask.distributed import Client
client = Client(sys.argv[1], timeout=30)
attached = time.time()
assert sum(client.run(lambda: 1).values()) == 4
replied = time.time()
client.close()
print("attach_start: " + json.dumps({"begin": begin, "attached": attached, "replied": replied}))
"""


def dask_cluster(directory: str, env: dict):
    """A scheduler and 4 workers of one thread each; (address, processes)."""
    address_file = os.path.join(directory, "dask.json")
    scheduler = subprocess.Popen(["dask-scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", address_file],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(address_file) and time.monotonic() < deadline:
        time.sleep(0.1)
    with open(address_file) as f:
        address = json.load(f)["address"]
    workers = [subprocess.Popen(["dask-worker", address, "--nthreads", "1", "--nworkers", "1",
                                 "--no-dashboard"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
               for _ in range(4)]
    return address, [scheduler, *workers]


def unlaunched(env: dict) -> dict:
    return {k: v for k, v in env.items() if not k.startswith(("OMPI_", "PMIX_"))}


def timed(command, env) -> dict:
    started = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}:\n{done.stderr[-2000:]}")
    line = next(line for line in done.stdout.splitlines()
                if line.startswith(("attach_start: ", "python_start: ")))
    marks = json.loads(line.split(": ", 1)[1])
    return {"total": marks["replied"] - started, **{k: v - started for k, v in marks.items()}}


def main() -> None:
    directory = tempfile.mkdtemp(prefix="crown-attach-bench-")
    os.chmod(directory, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=directory, CROWN_PYTHON=PYTHON)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    client = os.path.join(directory, "client.py")
    with open(client, "w") as f:
        f.write(CLIENT)
    dask_client = os.path.join(directory, "dask_client.py")
    with open(dask_client, "w") as f:
        f.write(DASK_CLIENT)
    served = subprocess.Popen([os.path.join(ROOT, "launch", "crownrun"), "-n", "4", "--serve"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    dask_address, dask_processes = dask_cluster(directory, unlaunched(env))
    try:
        for line in served.stdout:
            if "crown: serving 4 ranks" in line:
                break
        # The Dask cluster is up once a client sees its 4 workers.
        subprocess.run([PYTHON, "-c", "import sys; from dask.distributed import Client; "
                        "Client(sys.argv[1]).wait_for_workers(4, timeout=60)", dask_address],
                       env=unlaunched(env), check=True, timeout=90)
        variants = {
            "attach": ([PYTHON, client], unlaunched(env)),
            "dask": ([PYTHON, dask_client, dask_address], unlaunched(env)),
            "plain 4": ([PYTHON, PROG], dict(unlaunched(env), PYTHON_START_PROCS="4")),
            "mpirun 4": (["mpirun", "--oversubscribe", "-n", "4", PYTHON, PROG], env),
        }
        times = {name: [] for name in variants}
        for round_ in range(ROUNDS):
            for name, (command, variant_env) in variants.items():
                times[name].append(timed(command, variant_env)["total"])
            said = ", ".join(f"{name} {values[-1]:.2f} s" for name, values in times.items())
            print(f"round {round_ + 1}: {said}", flush=True)
    finally:
        for process in (served, *dask_processes):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    attach = statistics.median(times["attach"])
    print(f"\nfrom python3's start to the first reply of 4 ranks, {ROUNDS} rounds:")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:9} {min(values):.2f}-{max(values):.2f} s (median {median:.2f}), "
              f"{median / attach:.1f}x attach")


if __name__ == "__main__":
    sys.exit(main())
