"""`crown debug` in a real terminal (issue 15): tmux runs the CLI against a
real 4-rank mpirun job whose endpoint stops at breakpoint() on every rank.
It lists the sessions; attaches to one, prints, steps, detaches with
Ctrl-D and re-attaches; continues it; casts a command to ranks(0,2);
continues the rest. Then, with CROWN_DEBUG_POST_MORTEM=1, the endpoint that
raises on rank 3 stops in post-mortem pdb, is listed, and once continued
its caller gets the exception (an ActorError). `crown status` shows the stopped ranks.
Run by ctest with PYTHONPATH set."""
import json
import os
import subprocess
import sys
import tempfile
import time

from terminal import BackgroundJob, Terminal

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable
MPIRUN = sys.argv[1] if len(sys.argv) > 1 else "mpirun"


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def sessions(env):
    """`crown debug` fed from a pipe: the list, as rows."""
    got = subprocess.run([PYTHON, "-m", "crown", "debug"], input="list\nquit\n", env=env,
                         capture_output=True, text=True, timeout=60)
    check(got.returncode == 0, got.stderr)
    return [line for line in got.stdout.splitlines() if line.startswith("debugee ")]


def wait_for_sessions(env, count, function):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = sessions(env)
        if len([row for row in rows if f" {function} " in row]) == count:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"{count} sessions did not stop in {function}: {rows}")


def main():
    debug_dir = tempfile.mkdtemp(prefix="crown-debug-test-")
    os.chmod(debug_dir, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=debug_dir, CROWN_DEBUG_POST_MORTEM="1")
    job = BackgroundJob([MPIRUN, "--oversubscribe", "-n", "4", "-x", "PYTHONPATH", "-x",
                         "CROWN_DEBUG_DIR", "-x", "CROWN_DEBUG_POST_MORTEM", PYTHON,
                         os.path.join(HERE, "debug_job.py")], env)
    terminal = None
    try:
        job.wait_for("calling step")
        rows = wait_for_sessions(env, 4, "step")
        print("\n".join(rows), flush=True)
        check(sorted(int(row.split()[1]) for row in rows) == [0, 1, 2, 3], rows)

        status = subprocess.run([PYTHON, "-m", "crown", "status", "--json"], env=env,
                                capture_output=True, text=True, timeout=60)
        states = [row["state"] for row in json.loads(status.stdout)]
        check(states == ["stopped"] * 4, f"crown status while stopped: {states}")

        terminal = Terminal([PYTHON, "-m", "crown", "debug"], env)
        terminal.expect("crown_dbg>")
        terminal.type("list")
        terminal.expect("actor", "debugee", "step", "crown_dbg>")
        terminal.type("attach debugee 1")
        terminal.expect("-> value = value * 10", "(Pdb)")
        terminal.type("p value")
        terminal.expect("8\n", "(Pdb)")  # 7 + rank 1
        terminal.type("n")
        terminal.expect("-> return value", "(Pdb)")
        terminal.type("p value")
        terminal.expect("80\n", "(Pdb)")
        terminal.keys("C-d")
        terminal.expect("(detached: the session stays stopped)", "crown_dbg>")
        terminal.type("list")
        terminal.expect("debugee", "crown_dbg>")
        terminal.type("attach debugee 1")
        terminal.expect("(Pdb)")
        terminal.type("p value * 2")
        terminal.expect("160\n", "(Pdb)")
        terminal.type("c")
        terminal.expect("(the session continued)", "crown_dbg>")
        print("crown debug: attached, stepped, detached, re-attached, continued", flush=True)

        terminal.type("cast debugee ranks(0,2) p value")
        terminal.expect("[debugee 0] 7\n", "[debugee 2] 9\n", "crown_dbg>")
        terminal.type("cast debugee ranks(procs=3) p rank")
        terminal.expect("[debugee 3] 3\n", "crown_dbg>")
        terminal.type("continue")
        terminal.expect("crown_dbg>")
        job.wait_for("step returned [70, 80, 90, 100]")
        print("crown debug: cast to ranks(0,2) and procs=3, continued all", flush=True)

        wait_for_sessions(env, 1, "fail")
        terminal.type("list")
        terminal.expect("fail", "crown_dbg>")
        terminal.type("attach debugee 3")
        terminal.expect("(Pdb)")
        terminal.type("p rank")
        terminal.expect("3\n", "(Pdb)")
        terminal.type("c")
        terminal.expect("(the session continued)", "crown_dbg>")
        job.wait_for("fail raised ActorError: rank 3 has a bad shard")  # Monarch wraps it
        print("crown debug: post-mortem on rank 3, then its caller got the error", flush=True)
        terminal.type("quit")
        check(job.process.wait(timeout=60) == 0, "the job failed")
        print("debug_cli: PASS", flush=True)
    finally:
        if terminal is not None:
            terminal.close()
        job.stop()


if __name__ == "__main__":
    main()
