"""A driver of a real Jupyter kernel for the notebook tests (notebook_kernel.py,
notebook_attach.py): ipykernel, started and spoken to through jupyter_client's
KernelManager and client as JupyterLab does it. A Notebook runs cells, collects
what each printed and returned, logs every cell for a failure's message, and
raises Failed when a cell raised, did not finish or the kernel died.

Call require() first: without jupyter_client or ipykernel the test fails,
saying so, rather than skipping.
"""

import json
import os
import re
import sys
import time

STARTUP_S = 60  # a kernel's start, until it answers kernel_info
CELL_S = 120  # one cell (a spawn on a loaded machine takes seconds)
LAUNCHER_VARIABLES = ("OMPI_", "PMIX_")  # a kernel started by no launcher has none of these

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython's colours in a traceback

try:
    import ipykernel  # noqa: F401 - only checked: the kernel runs it, in this interpreter
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
except ImportError as error:
    missing = error
else:
    missing = None


class Failed(Exception):
    pass


def require(test: str) -> None:
    """Exits 1, naming `test`, when jupyter_client or ipykernel is missing."""
    if missing is not None:
        print(f"{test}: FAILED: {missing}; this test needs Debian's python3-jupyter-client "
              "and python3-ipykernel (launch/install-deps installs them)", flush=True)
        sys.exit(1)


def command_line(pid: int) -> str:
    """What a process runs, for a failure's message."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except FileNotFoundError:
        return "(gone)"


class Notebook:
    """One kernel and a client on it, as a notebook's front end holds them.
    The kernel runs in `folder` (its working directory, first on its sys.path)
    with `env`, as given; `name`, when set, prefixes the names of its cells."""

    def __init__(self, folder: str, env: dict, name: str = ""):
        self.name = name
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
        # ipykernel's debugger: no warning per start.
        self.env = dict(env, PYDEVD_DISABLE_FILE_VALIDATION="1")
        self.km = KernelManager(kernel_name="crown-test",
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels_dir]))
        self.kc = None
        self.log = []  # every cell run, with its output, for a failure's message

    def cell(self, name: str) -> str:
        return f"{self.name}/{name}" if self.name else name

    def start(self) -> None:
        self.km.start_kernel(env=self.env, cwd=self.folder)
        self.connect()

    def connect(self) -> None:
        """A new client on the kernel (after a start or restart), once it answers."""
        if self.kc is not None:
            self.kc.stop_channels()
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=STARTUP_S)
        except RuntimeError as e:
            who = f"{self.name}: the kernel" if self.name else "the kernel"
            raise Failed(f"{who} did not answer within {STARTUP_S} s: {e}") from e

    def kernel_pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(self, name: str, code: str, timeout: float = None, on_output=None) -> dict:
        """Executes one cell; returns its stdout and its result (text/plain).
        on_output() is called once, when the cell first prints. Raises Failed
        naming the cell, with all it printed, when it raised, did not finish
        within `timeout` (CELL_S by default), or the kernel died."""
        name = self.cell(name)
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
        """run(), and Failed unless the cell's result (text/plain) is `result`."""
        out = self.run(name, code)
        if out["result"] != result:
            raise Failed(f"cell {self.cell(name)} gave {out['result']!r}, not {result!r}; its "
                         f"output:\n{out['stdout']}{out['stderr']}")
        return out

    def printed(self, name: str, code: str, marker: str):
        """The JSON value the cell printed after `marker`, on that line."""
        text = self.run(name, code)["stdout"]
        try:
            return json.loads(text.split(marker, 1)[1].strip().splitlines()[0])
        except (IndexError, ValueError) as e:
            raise Failed(f"cell {self.cell(name)} printed no {marker!r} line: {text!r}") from e

    def no_launcher(self, name: str = "environment") -> None:
        """The kernel is this interpreter, with no Open MPI or PMIx variable
        (checked by the cell `name`)."""
        where = self.run(name, "import os, sys\n"
                         "print(sys.executable, os.getpid(), sorted(k for k in os.environ "
                         f"if k.startswith({LAUNCHER_VARIABLES!r})))")["stdout"].split()
        if where != [sys.executable, str(self.kernel_pid()), "[]"]:
            raise Failed(f"{self.name or 'the kernel'} is not a plain {sys.executable} started "
                         f"by no launcher (pid {self.kernel_pid()}): it says {' '.join(where)}")

    def shut_down(self) -> int:
        """File > Shut Down: the client goes, the kernel is asked to exit.
        Returns the pid the kernel had."""
        kernel = self.kernel_pid()
        self.kc.stop_channels()
        self.kc = None
        self.km.shutdown_kernel(now=False)
        return kernel

    def close(self) -> None:
        """The client goes and the kernel is killed, if either is left."""
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)
