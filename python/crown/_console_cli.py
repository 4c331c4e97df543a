"""`crown console`, `crown console --run script.py` and `crown stop`: the
client side of a served job's console (_console.py has the protocol).

Input is read here, with readline's editing and history; each line goes to
the controller, which says whether it wants more ("... ") and sends back
what the code printed, on stdout or stderr as it was printed there.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from typing import List

from ._jobs import CONSOLE_HELLO, CliError, Job, connect


class _Connection:
    def __init__(self, job: Job, command: str):
        self._sock = connect(job, job.console_address(), command, 10.0, hello=CONSOLE_HELLO)
        self._sock.settimeout(None)  # code may run for as long as it needs
        self._lines = self._sock.makefile("rb")

    def send(self, **message) -> None:
        self._sock.sendall((json.dumps(message) + "\n").encode("utf-8"))

    def until(self, *keys: str) -> dict:
        """Prints what the job sends until a message that has one of `keys`;
        Ctrl-C meanwhile interrupts the code running there."""
        while True:
            try:
                line = self._lines.readline()
            except KeyboardInterrupt:
                self.send(interrupt=True)
                continue
            if not line:
                raise CliError("the served job went away (it was stopped, or its controller "
                               "died)")
            if line.startswith(b"refused: "):
                raise CliError(line.decode("utf-8", "replace").strip())
            message = json.loads(line)
            if "out" in message:
                sys.stdout.write(message["out"])
                sys.stdout.flush()
            if "err" in message:
                sys.stderr.write(message["err"])
                sys.stderr.flush()
            if any(key in message for key in keys):
                return message

    def close(self) -> None:
        self._sock.close()


def attach(job: Job) -> int:
    """The REPL, until Ctrl-D (which leaves the job and its namespace as they are)."""
    try:
        importlib.import_module("readline")  # input() gains line editing and history
    except ImportError:
        pass
    connection = _Connection(job, "console")
    try:
        prompt = connection.until("prompt")["prompt"]
        while True:
            try:
                line = input(prompt)
            except EOFError:
                print()
                break
            except KeyboardInterrupt:
                print("\nKeyboardInterrupt")
                connection.send(reset=True)
                prompt = connection.until("prompt")["prompt"]
                continue
            connection.send(line=line)
            prompt = connection.until("prompt")["prompt"]
    finally:
        connection.close()
    print("crown: detached; the job and what you defined live on (`crown console` "
          "re-attaches, `crown stop` ends the job)", file=sys.stderr)
    return 0


def run(job: Job, script: str, argv: List[str]) -> int:
    """The script's exit code, as `python3 script.py` would give it."""
    try:
        with open(script, encoding="utf-8") as f:
            source = f.read()
    except OSError as error:
        raise CliError(f"cannot read the script {script}: {error}") from None
    connection = _Connection(job, "run")
    try:
        connection.send(path=os.path.abspath(script), source=source, argv=argv)
        return int(connection.until("exit")["exit"])
    finally:
        connection.close()


def stop(job: Job, timeout: float) -> int:
    """Ends the served job, and waits (at most `timeout`) for it to end: its
    controller to exit, or from another node its files to go."""
    connection = _Connection(job, "stop")
    try:
        connection.until("exit")
    finally:
        connection.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.here():
            try:
                os.kill(job.pid, 0)
            except ProcessLookupError:
                return 0
        elif not os.path.exists(job.base + ".token"):
            return 0
        time.sleep(0.05)
    raise CliError(f"the job's controller (pid {job.pid}) still runs {timeout:.0f} s after it "
                   f"was told to stop")
