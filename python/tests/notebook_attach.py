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
ipykernel is a failure, not a skip.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from polling import gone_within
from terminal import BackgroundJob

HERE = os.path.dirname(os.path.abspath(__file__))
CROWNRUN = os.path.join(HERE, "..", "..", "launch", "crownrun")
SERVE_S = 90  # crownrun -n 3 --serve, until it says it serves
STARTUP_S = 60  # a kernel's start, until it answers kernel_info
CELL_S = 120  # one cell (a spawn on a loaded machine takes seconds)
FREED_S = 15  # a killed client frees the job within ~3 s; a cell retries until this
GONE_S = 10  # the job's ranks are gone this long after crownrun exits
STOP_S = 60  # crown stop, then crownrun's exit

try:
    import ipykernel  # noqa: F401 - only checked: the kernel runs it, in this interpreter
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
except ImportError as missing:
    print(f"notebook_attach: FAILED: {missing}; this test needs Debian's python3-jupyter-client "
          "and python3-ipykernel (launch/install-deps installs them)", flush=True)
    sys.exit(1)


class Failed(Exception):
    pass


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

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython's colours in a traceback


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except FileNotFoundError:
        return "(gone)"


def client_env(env: dict) -> dict:
    """A client is started by no launcher: none of Open MPI's or PMIx's variables."""
    return {k: v for k, v in env.items() if not k.startswith(("OMPI_", "PMIX_", "OPAL_"))}


class Notebook:
    """One kernel and a client on it, as a notebook's front end holds them."""

    def __init__(self, name: str, folder: str, env: dict):
        self.name = name
        self.folder = os.path.join(folder, name)
        # A kernel spec of this interpreter, so that the kernel runs what the
        # test runs rather than whatever "python3" means.
        kernels_dir = os.path.join(self.folder, "kernels")
        spec_dir = os.path.join(kernels_dir, "crown-test")
        os.makedirs(spec_dir)
        with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
            json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                "{connection_file}"],
                       "display_name": "crown test", "language": "python"}, f)
        self.env = dict(client_env(env), PYDEVD_DISABLE_FILE_VALIDATION="1")
        self.km = KernelManager(kernel_name="crown-test",
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
        self.kc = None
        self.log = []  # every cell run, with its output, for a failure's message

    def start(self) -> None:
        self.km.start_kernel(env=self.env, cwd=self.folder)
        self.connect()

    def connect(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=STARTUP_S)
        except RuntimeError as e:
            raise Failed(f"{self.name}: the kernel did not answer within {STARTUP_S} s: {e}") \
                from e

    def kernel_pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(self, cell: str, code: str) -> dict:
        """Executes one cell; returns its stdout and its result (text/plain).
        Raises Failed naming the cell, with all it printed, when it raised,
        did not finish within CELL_S, or the kernel died."""
        name = f"{self.name}/{cell}"
        out = {"stdout": "", "stderr": "", "result": None, "error": None}

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out[content["name"]] += content["text"]
            elif kind == "execute_result":
                out["result"] = content["data"].get("text/plain")
            elif kind == "error":
                out["error"] = ANSI.sub("", "\n".join(content["traceback"]))

        started = time.monotonic()
        try:
            reply = self.kc.execute_interactive(code, timeout=CELL_S, output_hook=hook,
                                                allow_stdin=False, stop_on_error=False)
        except TimeoutError:
            reply = None
        seconds = time.monotonic() - started
        self.log.append(f"--- cell {name} ({seconds:.1f} s) ---\n{code.strip()}\n"
                        f"--- its output ---\n{out['stdout']}{out['stderr']}"
                        f"{out['result'] or ''}\n{out['error'] or ''}")
        print(f"cell {name}: {seconds:.1f} s", flush=True)
        if reply is None:
            why = f"did not finish within {CELL_S} s" + (
                "" if self.km.is_alive() else " (the kernel died)")
        elif reply["content"]["status"] != "ok":
            why = "raised"
        else:
            return out
        raise Failed(f"cell {name} {why}:\n{code.strip()}\n--- the kernel's output ---\n"
                     f"{out['stdout']}{out['stderr']}{out['error'] or ''}")

    def expect(self, cell: str, code: str, result: str) -> dict:
        out = self.run(cell, code)
        if out["result"] != result:
            raise Failed(f"cell {self.name}/{cell} gave {out['result']!r}, not {result!r}; its "
                         f"output:\n{out['stdout']}{out['stderr']}")
        return out

    def printed(self, cell: str, code: str, marker: str):
        """The JSON value the cell printed after `marker`."""
        text = self.run(cell, code)["stdout"]
        try:
            return json.loads(text.split(marker, 1)[1].strip().splitlines()[0])
        except (IndexError, ValueError) as e:
            raise Failed(f"cell {self.name}/{cell} printed no {marker!r} line: {text!r}") from e

    def no_launcher(self) -> None:
        """The kernel is this interpreter, with no Open MPI or PMIx variable."""
        where = self.run("environment", "import os, sys\n"
                         "print(sys.executable, os.getpid(), sorted(k for k in os.environ "
                         "if k.startswith(('OMPI_', 'PMIX_'))))")["stdout"].split()
        if where != [sys.executable, str(self.kernel_pid()), "[]"]:
            raise Failed(f"{self.name} is not a plain {sys.executable} started by no launcher "
                         f"(pid {self.kernel_pid()}): it says {' '.join(where)}")

    def attach(self, job: int, kept: list) -> dict:
        seen = self.printed("attach", ATTACH, "attached")
        if seen["job"] != job or seen["rank"] < 3 or seen["kept"] != kept:
            raise Failed(f"{self.name} attached as {seen}; expected the job {job}, a rank past "
                         f"its 3, kept meshes {kept}")
        print(f"{self.name} (kernel {self.kernel_pid()}): attached as rank {seen['rank']} after "
              f"{seen['refusals']} refusals, {seen['waited']} s", flush=True)
        return seen

    def close(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)


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
        kernel = first.kernel_pid()
        first.kc.stop_channels()
        first.kc = None
        first.km.shutdown_kernel(now=False)
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
