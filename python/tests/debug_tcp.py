"""The job's servers from another node (issue 15, "Access"): the controller
listens on TCP too (CROWN_DEBUG_TCP), and a client in a network namespace
of its own, under another host name, reaches it over a veth pair with
only the shared debug directory (CROWN_DEBUG_DIR, a user's home on a real
cluster) to find it: `crown jobs`, `crown status`, `crown stacks`, `crown
console --run` and `crown stop` all work there; a wrong proof over TCP is
refused, and so is another user, who cannot read the directory. Needs root
(ip netns, unshare); run by ctest with PYTHONPATH set; argv[1] is
launch/crownrun. Only the namespace and the 10.x.y.0/30 it makes here are
ever a target of its traffic."""
import hashlib
import json
import os
import pwd
import random
import socket
import subprocess
import sys
import tempfile

from terminal import BackgroundJob

PYTHON = sys.executable
CROWNRUN = sys.argv[1]
TAG = f"crdbg{os.getpid() % 100000}"
OTHER_USER = "crown-test-other"


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def ip(*args):
    subprocess.run(["ip", *args], check=True, timeout=30)


def other_node(env, *command, user=None):
    """`command` in the namespace, as host "othernode" (and as `user`)."""
    inner = " ".join([f"PYTHONPATH={env['PYTHONPATH']}", f"CROWN_DEBUG_DIR={env['CROWN_DEBUG_DIR']}",
                      *command])
    if user is not None:
        inner = f"runuser -u {user} -- env {inner}"
    return subprocess.run(["ip", "netns", "exec", TAG, "unshare", "--uts", "sh", "-c",
                           f"hostname othernode; exec env {inner}"],
                          capture_output=True, text=True, timeout=90)


def main():
    prefix = f"10.{random.randint(100, 199)}.{random.randint(0, 249)}"
    here, there = f"{prefix}.1", f"{prefix}.2"
    ip("netns", "add", TAG)
    made_user = False
    job = None
    try:
        ip("link", "add", f"{TAG}-a", "type", "veth", "peer", "name", f"{TAG}-b")
        ip("link", "set", f"{TAG}-b", "netns", TAG)
        ip("addr", "add", f"{here}/30", "dev", f"{TAG}-a")
        ip("link", "set", f"{TAG}-a", "up")
        ip("-n", TAG, "addr", "add", f"{there}/30", "dev", f"{TAG}-b")
        ip("-n", TAG, "link", "set", f"{TAG}-b", "up")
        ip("-n", TAG, "link", "set", "lo", "up")

        shared = tempfile.mkdtemp(prefix="crown-debug-tcp-")
        os.chmod(shared, 0o700)
        env = dict(os.environ, CROWN_DEBUG_DIR=shared, CROWN_DEBUG_TCP=f"{here}:0",
                   CROWN_LOG_WINDOW="0")
        job = BackgroundJob([CROWNRUN, "-n", "3", "--serve"], env)
        job.wait_for("crown: serving 3 ranks")
        names = sorted(os.listdir(shared))
        print("shared directory:", names, flush=True)
        pid = int(names[0].split("-")[1].split(".")[0])
        with open(os.path.join(shared, f"job-{pid}.tcp")) as f:
            host, port, node = f.read().split()
        check(host == here and node == socket.gethostname(), (host, port, node))

        listed = other_node(env, PYTHON, "-m", "crown", "jobs")
        check(listed.returncode == 0 and f"{pid}\ttcp:{here}:{port}" in listed.stdout, listed)
        status = other_node(env, PYTHON, "-m", "crown", "status", "--json")
        check(status.returncode == 0, status)
        rows = json.loads(status.stdout)
        check([row["state"] for row in rows] == ["alive"] * 3, rows)
        stacks = other_node(env, PYTHON, "-m", "crown", "stacks")
        check(stacks.returncode == 0 and "ranks 1-2:" in stacks.stdout, stacks)
        script = os.path.join(shared, "where.py")
        with open(script, "w") as f:
            f.write("import socket, crown\n"
                    "crown.run(lambda: print('ran on', socket.gethostname(), 'for',\n"
                    "                        socket.gethostname() != 'othernode'))\n")
        ran = other_node(env, PYTHON, "-m", "crown", "console", "--run", script)
        check(ran.returncode == 0 and "ran on" in ran.stdout and "for True" in ran.stdout, ran)
        print("from another node over TCP: jobs, status, stacks, console --run", flush=True)

        # Over TCP no SO_PEERCRED: a client that cannot prove the token is refused.
        with socket.create_connection((here, int(port)), timeout=10) as sock:
            stream = sock.makefile("rb")
            check(stream.readline().startswith(b"crown-debug 2 "), "no greeting over TCP")
            sock.sendall(os.urandom(32).hex().encode() + b" " +
                         hashlib.sha256(b"guess").hexdigest().encode() + b"\n")
            answer = stream.read().decode()
        check(answer.startswith("refused: the proof"), answer)
        try:
            pwd.getpwnam(OTHER_USER)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", OTHER_USER], check=True)
            made_user = True
        other = other_node(env, PYTHON, "-m", "crown", "status", user=OTHER_USER)
        check(other.returncode != 0 and "only its owner may" in other.stderr, other)
        print(f"refused over TCP: {answer.strip()}; another user: {other.stderr.strip()}",
              flush=True)

        stopped = other_node(env, PYTHON, "-m", "crown", "stop")
        check(stopped.returncode == 0, stopped)
        check(job.process.wait(timeout=60) == 0, "the served job's crownrun did not exit 0")
        left = [name for name in os.listdir(shared) if name.startswith("job-")]
        check(left == [], f"left behind: {left}")
        print("stopped from another node (its crownrun exited 0)", flush=True)
        print("debug_tcp: PASS", flush=True)
    finally:
        if job is not None:
            job.stop()
        if made_user:
            subprocess.run(["userdel", OTHER_USER], check=False)
        subprocess.run(["ip", "link", "del", f"{TAG}-a"], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", TAG], capture_output=True, timeout=30)


if __name__ == "__main__":
    main()
