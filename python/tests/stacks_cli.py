"""`crown stacks` from another terminal (issue 15): against a real mpirun job
whose controller is blocked in C with the GIL held and whose rank 2 spins in
Python, every rank's stacks come within 2 s, merged; `crown jobs` lists the
job; `crown status` answers beside a client that stalls; a wrong token and
(as root) another user are refused; when the job ends
its socket and token are gone. Run by ctest with PYTHONPATH set."""
import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable
OTHER_USER = "crown-test-other"
MPIRUN = sys.argv[1] if len(sys.argv) > 1 else "mpirun"


def crown_cli(*args, env, user=None):
    command = [PYTHON, "-m", "crown", *args]
    if user is not None:
        command = ["runuser", "-u", user, "--", "env", f"PYTHONPATH={env['PYTHONPATH']}",
                   f"CROWN_DEBUG_DIR={env['CROWN_DEBUG_DIR']}", *command]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    debug_dir = tempfile.mkdtemp(prefix="crown-debug-test-")
    os.chmod(debug_dir, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=debug_dir)
    job = subprocess.Popen(
        [MPIRUN, "--oversubscribe", "-n", "4", "-x", "PYTHONPATH", "-x", "CROWN_DEBUG_DIR",
         PYTHON, os.path.join(HERE, "stacks_cli_job.py"), "15"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    made_user = False
    try:
        for line in job.stdout:
            print(f"job: {line}", end="", flush=True)
            if line.startswith("controller blocked: pid "):
                controller = int(line.split()[-1])
                break
        else:
            raise AssertionError("the job ended before its controller blocked")
        time.sleep(0.5)  # rank 2 is inside its loop, rank 0 inside sleep()

        listed = crown_cli("jobs", env=env)
        check(listed.returncode == 0 and str(controller) in listed.stdout, listed)
        started = time.monotonic()
        stacks = crown_cli("stacks", env=env)
        took = time.monotonic() - started
        print(stacks.stdout, stacks.stderr, flush=True)
        check(stacks.returncode == 0, f"crown stacks failed: {stacks.stderr}")
        print(f"crown stacks: 4 ranks in {took:.2f} s, the controller blocked", flush=True)
        check(took < 2.0, f"crown stacks took {took:.2f} s")
        check("in main" in stacks.stdout and "stacks_cli_job.py" in stacks.stdout, stacks.stdout)
        check("in spin_in_python" in stacks.stdout, stacks.stdout)
        check("ranks 1-3:" in stacks.stdout, "the workers' serving threads are not merged")
        as_json = crown_cli("stacks", "--json", env=env)
        check(as_json.returncode == 0 and as_json.stdout.count('"rank":') == 4, as_json.stdout)

        # crown status: a row per rank, with what each holds, while the
        # controller is blocked, and while another client holds the server
        # (greeted, it sends nothing: the server waits 5 s for its proof).
        stalled = socket.socket(socket.AF_UNIX)
        stalled.settimeout(10)
        stalled.connect(os.path.join(debug_dir, f"job-{controller}.sock"))
        check(stalled.makefile("rb").readline().startswith(b"crown-debug "), "no greeting")
        started = time.monotonic()
        status = crown_cli("status", "--json", env=env)
        took = time.monotonic() - started
        stalled.close()
        check(status.returncode == 0, status.stderr)
        check(took < 2.0, f"crown status took {took:.2f} s beside a stalled client")
        rows = json.loads(status.stdout)
        check([row["rank"] for row in rows] == [0, 1, 2, 3], rows)
        check(all(row["state"] == "alive" and row["rss"] > 0 and row["actors"] >= 1
                  for row in rows), rows)
        check(rows[2]["handled"] >= 2 and rows[3]["handled"] >= 1, rows)  # pings, spawns, the spin
        # Under load: the calls queued behind rank 2's spin, and the controller's wait on them.
        check(rows[2]["queued"] >= 5 and rows[0]["inflight"] >= 5, rows)
        # The controller's links keep reading heartbeats while its program is
        # blocked: it heard from each worker lately (ms; the bound leaves room
        # for a loaded machine). Its own row has no link, so no "heard".
        check("heard" not in rows[0], rows)
        check(all(isinstance(row.get("heard"), int) and 0 <= row["heard"] < 60000
                  for row in rows[1:]), rows)
        print(f"crown status: 4 ranks in {took:.2f} s", flush=True)
        table = crown_cli("status", "--once", env=env)
        check(table.returncode == 0 and len(table.stdout.splitlines()) == 5, table.stdout)
        check(" heard " in table.stdout.splitlines()[0] and " s " in table.stdout, table.stdout)
        print(table.stdout, flush=True)

        # A client that cannot prove it read the token is refused.
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(os.path.join(debug_dir, f"job-{controller}.sock"))
            stream = sock.makefile("rb")
            check(stream.readline().startswith(b"crown-debug 2 "), "no greeting")
            sock.sendall(os.urandom(32).hex().encode() + b" " +
                         hashlib.sha256(b"guess").hexdigest().encode() + b"\n")
            answer = stream.read().decode()
        check(answer.startswith("refused: the proof"), answer)
        print(f"a wrong token: {answer.strip()}", flush=True)

        if os.geteuid() == 0 and shutil.which("useradd") and shutil.which("runuser"):
            try:
                pwd.getpwnam(OTHER_USER)
            except KeyError:
                subprocess.run(["useradd", "--no-create-home", OTHER_USER], check=True)
                made_user = True
            other = crown_cli("stacks", "--job", str(controller), env=env, user=OTHER_USER)
            check(other.returncode != 0 and "only its owner may" in other.stderr, other)
            print(f"another user: {other.stderr.strip()}", flush=True)
        else:
            print("another user: not tried (needs root, useradd and runuser)", flush=True)

        rest = job.stdout.read()
        print("job: " + rest.replace("\n", "\njob: "), flush=True)
        check(job.wait(timeout=60) == 0, f"the job exited {job.returncode}")
        check("main done" in rest, "main did not finish")
        left = os.listdir(debug_dir)
        check(left == [], f"left behind in the debug directory: {left}")
        print("stacks_cli: PASS", flush=True)
    finally:
        if job.poll() is None:
            job.kill()
        if made_user:
            subprocess.run(["userdel", OTHER_USER], check=False)
        shutil.rmtree(debug_dir, ignore_errors=True)


main()
