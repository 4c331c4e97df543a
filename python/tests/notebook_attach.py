"""A Jupyter kernel attached to a served job (issue 46, part 5): a real
ipykernel (driven by jupyter_client's KernelManager, as JupyterLab drives
it), started by no launcher, attaches to `crownrun -n 3 --serve` as its
controller. Its cells define an actor class in the notebook's __main__,
attach, hand out the job's ranks with spawn_procs, spawn a mesh by name,
call it and reduce a tensor among its procs. Checked then: a second client
(another kernel; later a plain python3) is refused while one kernel is
attached; Kernel > Restart detaches the old kernel and the new one finds
the mesh by name with its state intact (the counter continues, on the same
processes); so does a fresh kernel after the old one was SIGKILLed (its
death frees the job); shutting the kernel down and `crown stop --job P` end
the job: crownrun exits 0 and none of its ranks is left.

Run as a plain script (never under mpirun), with PYTHONPATH at the build's
python folder: `python3 notebook_attach.py`. Prints "notebook_attach: PASS"
and exits 0 when every step passed; otherwise exits 1, naming the step or
cell, the kernel's output and the job's. A missing jupyter_client or
ipykernel is a failure, not a skip. The kernels are driven by notebooks.py,
shared with notebook_kernel.py.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import notebooks
from notebooks import CELL_S, Failed, command_line
from polling import gone_within
from terminal import BackgroundJob

notebooks.require("notebook_attach")

HERE = os.path.dirname(os.path.abspath(__file__))
CROWNRUN = os.path.join(HERE, "..", "..", "launch", "crownrun")
SERVE_S = 90  # crownrun -n 3 --serve, until it says it serves
FREED_S = 15  # a killed client frees the job within ~3 s; a cell retries until this
GONE_S = 10  # the job's ranks are gone this long after crownrun exits
STOP_S = 60  # crown stop, then crownrun's exit

# The cells, as a user types them. The actor class lives in the notebook's
# __main__: it travels to the job's ranks by value.
DEFINE = '''
import os
import time
import torch
import crown
from crown.actor import Actor, endpoint

class Counter(Actor):
    def __init__(self, start):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def say(self):
        print(f"hello from the counter on rank {crown.actor.current_rank().rank}")
'''

# Attaching, retried while the job still holds a client that was killed
# (it frees the job within ~3 s); prints how many refusals it took.
ATTACH = f'''
import json
import time
import crown

def attach_when_free(seconds={FREED_S}):
    started, refusals = time.monotonic(), 0
    while True:
        try:
            return crown.attach(timeout=30), refusals, time.monotonic() - started
        except crown.AttachError as error:
            if "another client" not in str(error) or time.monotonic() - started > seconds:
                raise
            refusals += 1
            time.sleep(0.2)

a, refusals, waited = attach_when_free()
print("attached", json.dumps({{"job": a.job.pid, "rank": a.rank, "refusals": refusals,
                              "waited": round(waited, 2), "kept": sorted(a.actor_meshes())}}))
'''

SPAWN = '''
procs = a.host_mesh.spawn_procs(per_host={"procs": 3})
counters = procs.spawn("counter", Counter, 0)
sorted(counters.incr.call().get(timeout=60).values())
'''

TENSORS = '''
with procs.activate():
    t = torch.ones(4)
    total = t.reduce("procs")
crown.inspect(total).tolist()
'''

FIND = '''
counters = a.actor_mesh("counter")
sorted(counters.incr.call().get(timeout=60).values())
'''

# What the actors print shows in the cell (the job's merge window is 0 here,
# so the lines come at once; a second is plenty for them to arrive).
SAY = '''
counters.say.call().get(timeout=60)
time.sleep(1.0)
'''

PIDS = '''
print("worker pids", sorted(counters.pid.call().get(timeout=60).values()))
'''

SECOND = '''
import crown
try:
    crown.attach(timeout=30)
except crown.AttachError as error:
    print("refused:", error)
else:
    print("admitted")
'''


def client_env(env: dict) -> dict:
    """A client is started by no launcher: none of Open MPI's or PMIx's variables."""
    return {k: v for k, v in env.items() if not k.startswith(("OMPI_", "PMIX_", "OPAL_"))}


class Notebook(notebooks.Notebook):
    """A kernel of this test, in its own folder under `home`, named after it;
    it attaches to the served job."""

    def __init__(self, name: str, home: str, env: dict):
        super().__init__(os.path.join(home, name), client_env(env), name)

    def attach(self, job: int, kept: list) -> dict:
        seen = self.printed("attach", ATTACH, "attached")
        if seen["job"] != job or seen["rank"] < 3 or seen["kept"] != kept:
            raise Failed(f"{self.name} attached as {seen}; expected the job {job}, a rank past "
                         f"its 3, kept meshes {kept}")
        print(f"{self.name} (kernel {self.kernel_pid()}): attached as rank {seen['rank']} after "
              f"{seen['refusals']} refusals, {seen['waited']} s", flush=True)
        return seen


def job_pids(notebook: Notebook, job: BackgroundJob, expected: list = None) -> list:
    """The counters' pids: three distinct ranks of the served job (its
    session, crownrun's), none of them the kernel; the same as `expected`."""
    pids = notebook.printed("pids", PIDS, "worker pids")
    for pid in pids:
        try:
            session = os.getsid(pid)
        except ProcessLookupError:
            session = None
        if pid == notebook.kernel_pid() or session != job.process.pid:
            raise Failed(f"counter pid {pid} is not a rank of the served job (crownrun "
                         f"{job.process.pid}, session {session}): {command_line(pid)!r}")
    if len(set(pids)) != 3:
        raise Failed(f"expected 3 distinct counter pids, got {pids}")
    if expected is not None and pids != expected:
        raise Failed(f"{notebook.name}: the counters now run in {pids}, not in the job's ranks "
                     f"{expected} that the first kernel spawned them on")
    return pids


def refused(text: str, holder: int, who: str) -> None:
    if "refused:" not in text or "another client" not in text or f"pid {holder}" not in text:
        raise Failed(f"{who}, attaching while kernel {holder} is attached, was not refused as "
                     f"another client's: {text!r}")
    print(f"{who} refused: {text.strip()}", flush=True)


def killed(notebook: Notebook) -> None:
    """SIGKILL to the kernel (the OOM killer, a segfault): no atexit runs."""
    pid = notebook.kernel_pid()
    os.kill(pid, signal.SIGKILL)
    try:
        notebook.km.provisioner.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise Failed(f"the kernel {pid} still runs 30 s after SIGKILL") from None


def main() -> None:
    started = time.monotonic()
    home = tempfile.mkdtemp(prefix="crown-notebook-attach-")
    debug_dir = os.path.join(home, "debug")
    os.mkdir(debug_dir, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=debug_dir, CROWN_PYTHON=sys.executable,
               CROWN_LOG_WINDOW="0",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = BackgroundJob([CROWNRUN, "-n", "3", "--serve"], env)
    first = Notebook("notebook", home, env)
    second = Notebook("second notebook", home, env)
    try:
        try:
            job.wait_for("crown: serving 3 ranks", timeout=SERVE_S)
        except AssertionError as e:
            raise Failed(f"crownrun -n 3 --serve: {e}") from None
        serving = next(line for line in job.lines if "controller pid" in line)
        controller = int(serving.split("controller pid ")[1].split(")")[0])

        # Kernel 1: the whole session, from the class definition on.
        first.start()
        first.no_launcher()
        first.run("define", DEFINE)
        first.attach(controller, kept=[])
        first.expect("spawn", SPAWN, "[1, 1, 1]")
        first.expect("tensors", TENSORS, "[3.0, 3.0, 3.0, 3.0]")
        said = first.run("say", SAY)["stdout"]
        for rank in range(3):
            if f"[rank {rank}] hello from the counter on rank {rank}" not in said:
                raise Failed(f"the counters' lines did not show in the cell: {said!r}")
        pids = job_pids(first, job)
        print(f"kernel 1 ({first.kernel_pid()}): counters on the job's ranks {pids}", flush=True)

        # Another notebook, while kernel 1 is attached, is refused.
        second.start()
        second.no_launcher()
        refused(second.run("attach", SECOND)["stdout"], first.kernel_pid(), "a second kernel")
        second.close()
        first.expect("still attached", FIND, "[2, 2, 2]")

        # Kernel > Restart: the old kernel exits (its atexit detaches it) and
        # the new one finds the mesh by name, without defining Counter again.
        old = first.kernel_pid()
        first.km.restart_kernel(now=False)
        first.connect()
        if first.kernel_pid() == old:
            raise Failed(f"restart_kernel kept the kernel process {old}")
        first.name = "restarted notebook"
        first.no_launcher()
        seen = first.attach(controller, kept=["counter"])
        if seen["refusals"]:
            raise Failed(f"the restarted kernel was refused {seen['refusals']} times: the old "
                         f"kernel {old}, shut down, did not detach as it exited")
        first.expect("find", FIND, "[3, 3, 3]")
        job_pids(first, job, expected=pids)

        # SIGKILL: no atexit, the job frees itself; a fresh kernel re-runs the
        # notebook's cells (the class too) and finds the mesh.
        old = first.kernel_pid()
        killed(first)
        first.km.restart_kernel(now=True)
        first.connect()
        first.name = "notebook after SIGKILL"
        first.no_launcher()
        first.run("define", DEFINE)
        first.attach(controller, kept=["counter"])
        first.expect("find", FIND, "[4, 4, 4]")
        job_pids(first, job, expected=pids)

        # A plain python3, while this kernel is attached, is refused too.
        try:
            plain = subprocess.run([sys.executable, "-c", SECOND], env=client_env(env),
                                   cwd=home, capture_output=True, text=True, timeout=CELL_S)
        except subprocess.TimeoutExpired:
            raise Failed(f"a plain python3 attaching did not finish within {CELL_S} s") from None
        refused(plain.stdout + plain.stderr, first.kernel_pid(), "a plain python3")
        first.expect("after the plain python3", FIND, "[5, 5, 5]")

        # File > Shut Down, then crown stop: nothing of the job is left.
        kernel = first.shut_down()
        if gone_within([kernel], 10):
            raise Failed(f"the kernel {kernel} still runs after its shutdown")
        stop = subprocess.run([sys.executable, "-m", "crown", "stop", "--job", str(controller)],
                              env=client_env(env), capture_output=True, text=True,
                              timeout=STOP_S)
        if stop.returncode != 0:
            raise Failed(f"crown stop --job {controller} exited {stop.returncode}:\n"
                         f"{stop.stdout}{stop.stderr}")
        try:
            rc = job.process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            raise Failed(f"crownrun still runs {STOP_S} s after crown stop") from None
        if rc != 0:
            raise Failed(f"crownrun exited {rc} after crown stop")
        left = gone_within(pids + [controller], GONE_S)
        if left:
            raise Failed(f"after crown stop, the job's processes {left} still run {GONE_S} s on: "
                         + "; ".join(f"{pid}: {command_line(pid)}" for pid in left))
    except Failed as failure:
        print(f"notebook_attach: FAILED: {failure}", flush=True)
        print("--- every cell run so far ---\n" + "\n".join(first.log + second.log), flush=True)
        sys.exit(1)
    finally:
        first.close()
        second.close()
        job.stop()  # its process group: crownrun, mpirun and the ranks
        shutil.rmtree(home, ignore_errors=True)
    print(f"notebook_attach: passed in {time.monotonic() - started:.1f} s", flush=True)
    print("notebook_attach: PASS", flush=True)


if __name__ == "__main__":
    main()
