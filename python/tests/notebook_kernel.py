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
The kernel is driven by notebooks.py, shared with notebook_attach.py.
"""

import os
import shutil
import signal
import sys
import tempfile
import time

import notebooks
from notebooks import Failed, command_line
from polling import gone_within, running

notebooks.require("notebook_kernel")

GONE_S = 5  # the procs of a kernel that ended (restart, shutdown) are gone by then
# The notebook's folder, the kernel's working directory: first on its
# sys.path, which its procs get on their command lines, so that CMake's
# left_behind.sh finds this test's procs by it and not another test's.
FOLDER_PREFIX = "crown-notebook-"


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
# Open MPI starts in groups of their own, must serve on after it. The cell
# naps in short steps, as a training loop works: CPython's C handler only
# sets a flag, which the main thread checks between steps, so a SIGINT that
# lands after its last check and before a blocking call starts (or on
# another thread) waits out that whole call. One time.sleep(60) did, in CI
# and once in about 1,700 interrupts here: the kernel's main thread asleep
# in it, no signal pending.
NAP = '''
import time
print("napping", flush=True)
for _ in range(600):
    time.sleep(0.1)
'''
AFTER_INTERRUPT = '''
sorted(greeters.greet.call("again").get(timeout=60).values())
'''
AFTER_INTERRUPT_REPLY = "['hello, again, from gpu 0', 'hello, again, from gpu 1']"


class Notebook(notebooks.Notebook):
    """The notebook of this test: its cells, as a user runs them."""

    def session(self, label: str) -> list:
        """The user's cells: define, spawn and call, tensors, pids. Returns
        the workers' pids, each checked to be a new crown._spawned process."""
        self.no_launcher(f"{label}/environment")
        self.run(f"{label}/define", DEFINE)
        self.expect(f"{label}/spawn", SPAWN, SPAWN_REPLY)
        self.expect(f"{label}/tensors", TENSORS, TENSORS_REPLY)
        pids = self.printed(f"{label}/pids", PIDS, "worker pids")
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
    # Started by no launcher: none of Open MPI's or PMIx's variables (this
    # test is not under mpirun, but a stray one would make the kernel a rank).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(notebooks.LAUNCHER_VARIABLES)}
    notebook = Notebook(home, env)
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
        kernel = notebook.shut_down()
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
