"""Processes on demand in a notebook (issue 46): a real Jupyter kernel
(ipykernel, driven by jupyter_client's KernelManager as JupyterLab drives
it) that no launcher started becomes crown's controller on its first use,
and its cells spawn procs, spawn an actor class the notebook defined, call
it and run tensor work on the procs. Kernel > Interrupt leaves the procs
serving; restarting the kernel, its death (SIGKILL) and procs.stop() each
end its procs within 5 s, and it spawns again after each; shutting it down
leaves nothing.

Run as a plain script (never under mpirun), with PYTHONPATH at the build's
python folder: `python3 notebook_kernel.py`. Exits 0 when every step
passed; otherwise 1, naming the step or cell and the kernel's output. A
missing jupyter_client or ipykernel is a failure (exit 1), not a skip.
"""

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from polling import gone_within, running

STARTUP_S = 60  # a kernel's start, until it answers kernel_info
CELL_S = 120  # one cell (a spawn_procs on a loaded machine takes seconds)
GONE_S = 5  # the procs of a kernel that ended (restart, shutdown) are gone by then
# The notebook's folder, the kernel's working directory: first on its
# sys.path, which its procs get on their command lines, so that CMake's
# left_behind.sh finds this test's procs by it and not another test's.
FOLDER_PREFIX = "crown-notebook-"


class Failed(Exception):
    pass


try:
    import ipykernel  # noqa: F401 - only checked: the kernel runs it, in this interpreter
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
except ImportError as missing:
    print(f"notebook_kernel: FAILED: {missing}; this test needs Debian's python3-jupyter-client "
          "and python3-ipykernel (launch/install-deps installs them)", flush=True)
    sys.exit(1)


# The cells, as a user types them. The actor class lives in the notebook's
# __main__: it travels to the procs by value.
DEFINE = '''
import os
import torch
import crown
from crown.actor import Actor, current_rank, endpoint, this_host

class Greeter(Actor):
    def __init__(self, greeting):
        self.greeting = greeting

    @endpoint
    def greet(self, name):
        return f"{self.greeting}, {name}, from gpu {current_rank()['gpus']}"

    @endpoint
    def pid(self):
        return os.getpid()
'''

SPAWN = '''
procs = this_host().spawn_procs(per_host={"gpus": 2})
greeters = procs.spawn("greeters", Greeter, "hello")
sorted(greeters.greet.call("notebook").get(timeout=60).values())
'''
SPAWN_REPLY = "['hello, notebook, from gpu 0', 'hello, notebook, from gpu 1']"

TENSORS = '''
with procs.activate():
    x = torch.ones(4)
    r = x.reduce("gpus")
crown.inspect(r).tolist()
'''
TENSORS_REPLY = "[2.0, 2.0, 2.0, 2.0]"

PIDS = '''
print("worker pids", sorted(greeters.pid.call().get(timeout=60).values()))
'''

STOP = '''
procs.stop()
'''

# Kernel > Interrupt signals the kernel's process group: the procs, which
# Open MPI starts in groups of their own, must serve on after it.
NAP = '''
import time
print("napping", flush=True)
time.sleep(60)
'''
AFTER_INTERRUPT = '''
sorted(greeters.greet.call("again").get(timeout=60).values())
'''
AFTER_INTERRUPT_REPLY = "['hello, again, from gpu 0', 'hello, again, from gpu 1']"

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython's colours in a traceback


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except FileNotFoundError:
        return "(gone)"


class Notebook:
    """One kernel and a client on it, as a notebook's front end holds them."""

    def __init__(self, folder: str):
        self.folder = folder
        # A kernel spec of this interpreter (the build's python3), so that the
        # kernel runs what the test runs rather than whatever "python3" means.
        kernels_dir = os.path.join(folder, "kernels")
        spec_dir = os.path.join(kernels_dir, "crown-test")
        os.makedirs(spec_dir)
        with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
            json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                "{connection_file}"],
                       "display_name": "crown test", "language": "python"}, f)
        self.km = KernelManager(kernel_name="crown-test",
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
        self.kc = None
        self.log = []  # every cell run, with its output, for a failure's message

    def start(self) -> None:
        # Started by no launcher: none of Open MPI's or PMIx's variables (this
        # test is not under mpirun, but a stray one would make the kernel a rank).
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
        env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # ipykernel's debugger: no warning per start
        self.km.start_kernel(env=env, cwd=self.folder)
        self.connect()

    def connect(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=STARTUP_S)
        except RuntimeError as e:
            raise Failed(f"the kernel did not answer within {STARTUP_S} s: {e}") from e

    def kernel_pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(self, name: str, code: str, timeout: float = None, on_output=None) -> dict:
        """Executes one cell; returns its stdout and its result (text/plain).
        on_output() is called once, when the cell first prints. Raises Failed
        naming the cell, with all it printed, when it raised, did not finish
        within `timeout`, or the kernel died."""
        timeout = CELL_S if timeout is None else timeout
        out = {"stdout": "", "stderr": "", "result": None, "error": None}

        def hook(msg):
            nonlocal on_output
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out[content["name"]] += content["text"]
                if on_output is not None:
                    on_output, call = None, on_output
                    call()
            elif kind == "execute_result":
                out["result"] = content["data"].get("text/plain")
            elif kind == "error":
                out["error"] = ANSI.sub("", "\n".join(content["traceback"]))

        started = time.monotonic()
        try:
            reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook,
                                                allow_stdin=False, stop_on_error=False)
        except TimeoutError:
            reply = None
        seconds = time.monotonic() - started
        self.log.append(f"--- cell {name} ({seconds:.1f} s) ---\n{code.strip()}\n"
                        f"--- its output ---\n{out['stdout']}{out['stderr']}"
                        f"{out['result'] or ''}\n{out['error'] or ''}")
        print(f"cell {name}: {seconds:.1f} s", flush=True)
        if reply is None:
            why = f"did not finish within {timeout} s" + (
                "" if self.km.is_alive() else " (the kernel died)")
        elif reply["content"]["status"] != "ok":
            why = "raised"
        else:
            return out
        raise Failed(f"cell {name} {why}:\n{code.strip()}\n--- the kernel's output ---\n"
                     f"{out['stdout']}{out['stderr']}{out['error'] or ''}")

    def expect(self, name: str, code: str, result: str) -> dict:
        out = self.run(name, code)
        if out["result"] != result:
            raise Failed(f"cell {name} gave {out['result']!r}, not {result!r}; its output:\n"
                         f"{out['stdout']}{out['stderr']}")
        return out

    def session(self, label: str) -> list:
        """The user's cells: define, spawn and call, tensors, pids. Returns
        the workers' pids, each checked to be a new crown._spawned process."""
        where = self.run(f"{label}/environment", "import os, sys\n"
                         "print(sys.executable, os.getpid(), sorted(k for k in os.environ "
                         "if k.startswith(('OMPI_', 'PMIX_'))))")["stdout"].split()
        if where[:1] != [sys.executable] or where[1:2] != [str(self.kernel_pid())] or \
                where[2:] != ["[]"]:
            raise Failed(f"the kernel is not a plain {sys.executable} started by no launcher "
                         f"(pid {self.kernel_pid()}): it says {' '.join(where)}")
        self.run(f"{label}/define", DEFINE)
        self.expect(f"{label}/spawn", SPAWN, SPAWN_REPLY)
        self.expect(f"{label}/tensors", TENSORS, TENSORS_REPLY)
        printed = self.run(f"{label}/pids", PIDS)["stdout"]
        try:
            pids = json.loads(printed.split("worker pids", 1)[1].strip())
        except (IndexError, ValueError) as e:
            raise Failed(f"cell {label}/pids printed no list of pids: {printed!r}") from e
        kernel = self.kernel_pid()
        for pid in pids:
            if pid == kernel or "crown._spawned" not in command_line(pid):
                raise Failed(f"worker pid {pid} is not a proc that spawn_procs started "
                             f"(the kernel is {kernel}): {command_line(pid)!r}")
            if self.folder not in command_line(pid):
                raise Failed(f"worker {pid}'s command line lacks the kernel's sys.path, by which "
                             "python/tests/CMakeLists.txt finds procs left behind: update its "
                             f"pattern there ({command_line(pid)!r})")
        if len(set(pids)) != 2:
            raise Failed(f"expected 2 distinct worker pids, got {pids}")
        print(f"{label}: kernel {kernel}, workers {pids}", flush=True)
        return pids

    def close(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)


def gone(pids: list, what: str) -> None:
    left = gone_within(pids, GONE_S)
    if left:
        raise Failed(f"after {what}, workers {left} of the old kernel still run {GONE_S} s on: "
                     + "; ".join(f"{pid}: {command_line(pid)}" for pid in left))


def interrupted(notebook: Notebook, label: str) -> None:
    """Kernel > Interrupt during a running cell (once it has printed, so that
    it runs): the cell ends with KeyboardInterrupt and the procs serve on."""
    try:
        notebook.run(f"{label}/nap", NAP, timeout=30, on_output=notebook.km.interrupt_kernel)
    except Failed as failure:
        if "KeyboardInterrupt" not in str(failure):
            raise
    else:
        raise Failed(f"cell {label}/nap ended without the KeyboardInterrupt of Kernel > Interrupt")
    notebook.expect(f"{label}/after interrupt", AFTER_INTERRUPT, AFTER_INTERRUPT_REPLY)


def main() -> None:
    started = time.monotonic()
    home = tempfile.mkdtemp(prefix=FOLDER_PREFIX)
    notebook = Notebook(home)
    try:
        notebook.start()
        first = notebook.session("kernel 1")
        interrupted(notebook, "kernel 1")

        # Kernel > Restart: a shutdown request (the kernel exits, atexit ends
        # its procs), then a new kernel in its place.
        old = notebook.kernel_pid()
        notebook.km.restart_kernel(now=False)
        gone(first, "the kernel's restart")
        notebook.connect()
        if notebook.kernel_pid() == old:
            raise Failed(f"restart_kernel kept the kernel process {old}")
        second = notebook.session("kernel 2")
        if set(first) & set(second):
            raise Failed(f"the new kernel's workers {second} reuse the old ones' {first}")

        # ProcMesh.stop() from a cell ends them; a new spawn works after it.
        notebook.run("kernel 2/stop", STOP)
        gone(second, "procs.stop() in a cell")
        third = notebook.session("kernel 2 again")

        # The kernel dies alone (the OOM killer, a segfault): no atexit runs,
        # its procs go all the same; then the user restarts it.
        os.kill(notebook.kernel_pid(), signal.SIGKILL)
        gone(third, "the kernel's death (SIGKILL)")
        notebook.km.restart_kernel(now=True)
        notebook.connect()
        fourth = notebook.session("kernel 3")

        # File > Shut Down: nothing may be left.
        kernel = notebook.kernel_pid()
        notebook.kc.stop_channels()
        notebook.kc = None
        notebook.km.shutdown_kernel(now=False)
        gone(fourth, "the kernel's shutdown")
        if running(kernel):
            raise Failed(f"the kernel {kernel} still runs after its shutdown")
    except Failed as failure:
        print(f"notebook_kernel: FAILED: {failure}", flush=True)
        print("--- every cell run so far ---\n" + "\n".join(notebook.log), flush=True)
        sys.exit(1)
    finally:
        notebook.close()  # after a failure: the kernel is killed, its procs go with it
        shutil.rmtree(home, ignore_errors=True)
    print(f"notebook_kernel: passed in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
