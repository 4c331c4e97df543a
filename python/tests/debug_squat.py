"""Impostors of a job's servers (issue 43, finding 1): another local user
makes the victim's debug directory first, or puts a server of its own
behind a socket or a TCP address that the victim's client finds. The
client must apply the server's rules (the directory and its files this
user's and private, a Unix socket's server this user's) and the server
must prove the token back, so that `crown jobs` lists no impostor, `crown
stacks` prints no forged stacks and `crown console --run` sends the
script (and its secret) to nobody but the job.

Every impostor logs each byte it receives; the test asserts that none of
the victim's secrets, and in the first two cases no byte at all, reached
it. Needs root (useradd, runuser, chown); makes and removes a second local
user. Only 127.0.0.1 and Unix sockets the test makes are targets."""
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from other_user import OTHER_USER, end_processes, other_user

PYTHON = sys.executable

# The impostor: runs as the other user; serves the old and new greetings
# on every socket it is given, answers anything with forged stacks, and
# logs what each connection sent (hex) to LOG.
IMPOSTOR = r'''
import os, socket, sys, threading
log_path, version = sys.argv[1], sys.argv[2]
def serve(listener, hello):
    while True:
        sock, _ = listener.accept()
        threading.Thread(target=talk, args=(sock, hello), daemon=True).start()
def talk(sock, hello):
    got = b""
    try:
        sock.settimeout(5)
        sock.sendall(f"{hello} {version} {os.urandom(32).hex()}\n".encode())
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
            if version == "2" and got.count(b"\n") == 1:
                sock.sendall(os.urandom(32).hex().encode() + b"\n")  # a proof it cannot make
            if b"stacks" in got or b"status" in got:
                sock.sendall(b"rank 0 pid 1 host-bytes 6 python-bytes 0 native-bytes 0 "
                             b"error-bytes 0\nFORGEDend\n")
                break
    except OSError:
        pass
    with open(log_path, "a") as f:
        f.write(got.hex() + "\n")
    sock.close()
listeners = []
for spec in sys.argv[3:]:
    kind, where, hello = spec.split("=")
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.bind(where)
        os.chmod(where, 0o777)
    else:
        s = socket.create_server(("127.0.0.1", 0))
        with open(where, "w") as f:
            f.write(f"127.0.0.1 {s.getsockname()[1]} othernode\n")
    s.listen(8)
    threading.Thread(target=serve, args=(s, hello), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
'''


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def crown_cli(*args, directory, timeout=30):
    env = dict(os.environ, CROWN_DEBUG_DIR=directory)
    return subprocess.run([PYTHON, "-m", "crown", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


class Impostor:
    """The other user's process, serving `specs` ("unix=PATH=HELLO",
    "tcp=ADDRESS_FILE=HELLO"); its pid names its job files."""

    def __init__(self, workdir, version, specs):
        self.log = os.path.join(workdir, f"impostor-{len(os.listdir(workdir))}.log")
        script = os.path.join(workdir, "impostor.py")
        with open(script, "w") as f:
            f.write(IMPOSTOR)
        open(self.log, "w").close()
        for path in (script, self.log):
            os.chmod(path, 0o666)
        self.process = subprocess.Popen(
            ["runuser", "-u", OTHER_USER, "--", PYTHON, script, self.log, version, *specs],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(self.process.stdout.readline().strip() == "ready", "the impostor did not start")

    def received(self):
        with open(self.log) as f:
            return [bytes.fromhex(line.strip()) for line in f if line.strip()]

    def stop(self):
        end_processes()  # the impostor itself, not only its runuser
        self.process.wait()


def as_other(*command):
    subprocess.run(["runuser", "-u", OTHER_USER, "--", *command], check=True, timeout=30)


def write_secret_script(workdir, secret):
    script = os.path.join(workdir, "train.py")
    with open(script, "w") as f:
        f.write(f"API_KEY = {secret!r}\nprint('never run')\n")
    return script


def squatted_directory(workdir, secret_script, secret):
    """The default directory's case: /tmp/crown-NAME made 0755 by the other
    user, with a token and sockets of its own."""
    squatted = f"/tmp/crown-squat-{os.getpid()}"
    as_other("mkdir", "-m", "0755", squatted)
    try:
        # The impostor names its files after any live pid (the client's
        # liveness check passes): the test's own will do.
        pid = os.getpid()
        base = f"{squatted}/job-{pid}"
        as_other("sh", "-c", f"echo {secrets.token_hex(32)} > {base}.token; "
                             f"chmod 644 {base}.token")
        impostor = Impostor(workdir, "1", [f"unix={base}.sock=crown-debug",
                                           f"unix={base}.console=crown-console"])
        try:
            listed = crown_cli("jobs", directory=squatted)
            check(listed.returncode != 0 and str(pid) not in listed.stdout, listed)
            check("belongs to" in listed.stderr and OTHER_USER in listed.stderr, listed)
            stacks = crown_cli("stacks", directory=squatted)
            check(stacks.returncode != 0 and "FORGED" not in stacks.stdout, stacks)
            ran = crown_cli("console", "--run", secret_script, directory=squatted)
            check(ran.returncode != 0, ran)
            got = impostor.received()
            check(got == [], f"the impostor was sent {got}")
            print(f"squatted directory refused: {listed.stderr.strip()}", flush=True)
        finally:
            impostor.stop()
    finally:
        shutil.rmtree(squatted, ignore_errors=True)


def private_directory(workdir):
    directory = tempfile.mkdtemp(prefix="crown-victim-")
    os.chmod(directory, 0o700)
    return directory


def foreign_socket(workdir, secret_script):
    """A socket in the user's own private directory whose server runs as
    another user (as a swapped file would leave it): SO_PEERCRED refuses it
    before a byte is sent."""
    directory = private_directory(workdir)
    try:
        outside = os.path.join(workdir, "other")
        os.mkdir(outside)
        os.chmod(outside, 0o777)
        pid = os.getpid()
        impostor = Impostor(workdir, "2", [f"unix={outside}/s=crown-debug",
                                           f"unix={outside}/c=crown-console"])
        try:
            base = f"{directory}/job-{pid}"
            with open(base + ".token", "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.chmod(base + ".token", 0o600)
            for name, suffix in (("s", ".sock"), ("c", ".console")):
                os.rename(f"{outside}/{name}", base + suffix)
                os.chown(base + suffix, os.geteuid(), os.getegid())
                os.chmod(base + suffix, 0o600)
            stacks = crown_cli("stacks", "--job", str(pid), directory=directory)
            check(stacks.returncode != 0 and "FORGED" not in stacks.stdout, stacks)
            check(f"runs as {OTHER_USER}" in stacks.stderr, stacks)
            ran = crown_cli("console", "--run", secret_script, "--job", str(pid),
                            directory=directory)
            check(ran.returncode != 0 and f"runs as {OTHER_USER}" in ran.stderr, ran)
            got = impostor.received()
            check(all(not data for data in got), f"the impostor was sent {got}")
            print(f"foreign server refused: {stacks.stderr.strip()}", flush=True)
        finally:
            impostor.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def unproved_server(workdir, secret_script, secret):
    """The user's own private directory names a TCP address where the job's
    server is not (a copied name, a port taken after the job ended): the
    server cannot prove the token, so the client sends it no command."""
    directory = private_directory(workdir)
    try:
        pid = os.getpid()
        base = f"{directory}/job-{pid}"
        with open(base + ".token", "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        os.chmod(base + ".token", 0o600)
        outside = os.path.join(workdir, "addresses")
        os.mkdir(outside)
        os.chmod(outside, 0o777)
        impostor = Impostor(workdir, "2", [f"tcp={outside}/debug=crown-debug",
                                           f"tcp={outside}/console=crown-console"])
        try:
            # The impostor's addresses, where the job's would be (this user's, private).
            for name, suffix in (("debug", ".tcp"), ("console", ".console.tcp")):
                shutil.copyfile(f"{outside}/{name}", base + suffix)
                os.chmod(base + suffix, 0o600)
            stacks = crown_cli("stacks", "--job", str(pid), directory=directory)
            check(stacks.returncode != 0 and "FORGED" not in stacks.stdout, stacks)
            check("could not prove" in stacks.stderr, stacks)
            ran = crown_cli("console", "--run", secret_script, "--job", str(pid),
                            directory=directory)
            check(ran.returncode != 0 and "could not prove" in ran.stderr, ran)
            got = impostor.received()
            check(len(got) == 2, f"expected two connections, got {got}")
            for data in got:  # the client's nonce and proof, nothing after them
                check(data.count(b"\n") == 1 and len(data) == 64 + 1 + 64 + 1, data)
                check(secret.encode() not in data and b"stacks" not in data, data)
            print(f"unproved server refused: {ran.stderr.strip()}", flush=True)
        finally:
            impostor.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    check(os.geteuid() == 0, "needs root (useradd, runuser, chown)")
    workdir = tempfile.mkdtemp(prefix="crown-squat-test-")
    os.chmod(workdir, 0o755)
    try:
        with other_user():
            secret = "SECRET-" + secrets.token_hex(8)
            script = write_secret_script(workdir, secret)
            squatted_directory(workdir, script, secret)
            foreign_socket(workdir, script)
            unproved_server(workdir, script, secret)
        print("debug_squat: PASS", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
