"""What the CLI tests (debug_cli.py, console_cli.py, debug_tcp.py) run
against and in: a job in the background whose output lines are kept, and
a real terminal, a command in a detached tmux session of its own (its own
tmux server, so the tests never touch a user's), typed at with send-keys
and read with capture-pane."""
import os
import shlex
import signal
import subprocess
import threading
import time


class BackgroundJob:
    """`command` running, its output echoed ("job: ...") and kept in `lines`,
    in a process group of its own, so that stop() ends the launcher and
    every rank it started (a test that fails leaves no job behind)."""

    def __init__(self, command, env):
        self.lines = []
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            print(f"job: {line}", end="", flush=True)
            self.lines.append(line)

    def wait_for(self, text, timeout=60):
        """Until a line holds `text`; AssertionError when the job ends or the time is up."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.process.poll() is not None:
                time.sleep(0.2)  # its last lines may still be on their way
                if any(text in line for line in self.lines):
                    return
                raise AssertionError(f"the job ended before {text!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the job did not print {text!r} in {timeout} s")
            time.sleep(0.1)

    def stop(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the ranks too, if the job still runs
        except ProcessLookupError:
            pass
        if self.process.poll() is None:
            self.process.wait()


class Terminal:
    def __init__(self, command, env, passed=("PYTHONPATH", "CROWN_DEBUG_DIR")):
        """`command` (a list) with the `passed` variables of `env`."""
        self._tmux = ["tmux", "-L", f"crown-test-{os.getpid()}-{id(self)}"]
        line = " ".join(["env", *(f"{name}={shlex.quote(env[name])}" for name in passed),
                         *map(shlex.quote, command)])
        # remain-on-exit, set before the session is made: a command that prints
        # its last line and exits (`crown console` after Ctrl-D) leaves its
        # screen readable. Without it the pane, the session and the server
        # went with the process, and a loaded machine's expect() could find
        # only an empty screen (python.console_cli's flake).
        subprocess.run([*self._tmux, "-f", "/dev/null", "start-server", ";",
                        "set-option", "-g", "-w", "remain-on-exit", "on", ";",
                        "new-session", "-d", "-s", "t", "-x", "200", "-y", "50", line],
                       check=True, timeout=30)
        self.seen = 0  # screen text already matched

    def screen(self):
        return subprocess.run([*self._tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "t"],
                              capture_output=True, text=True, timeout=30).stdout

    def type(self, line):
        subprocess.run([*self._tmux, "send-keys", "-t", "t", "-l", line], check=True, timeout=30)
        subprocess.run([*self._tmux, "send-keys", "-t", "t", "Enter"], check=True, timeout=30)

    def keys(self, *keys):
        subprocess.run([*self._tmux, "send-keys", "-t", "t", *keys], check=True, timeout=30)

    def expect(self, *texts, timeout=30):
        """Waits for each text, in order, after what was matched before."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            at = self.seen
            for text in texts:
                found = screen.find(text, at)
                if found < 0:
                    break
                at = found + len(text)
            else:
                self.seen = at
                return screen
            if time.monotonic() > deadline:
                print(screen, flush=True)
                raise AssertionError(f"the terminal did not show {texts!r}")
            time.sleep(0.1)

    def close(self):
        subprocess.run([*self._tmux, "kill-server"], capture_output=True, timeout=30)
