"""Attaching to a served job (issue 46, part 4): `crownrun -n 3 --serve`
keeps a job's ranks alive, and clients started by no launcher (plain
`python3 attach_client.py MODE`, as a notebook or a login node's script
would be) attach to it as its controller with crown.attach(). Checked: a
client spawns, calls, casts, reduces a tensor and reads RDMA on the job's
ranks; detaching (or the client's death) leaves its actors alive, and the
next client finds them by name; a second client at once is refused, as is
another user; `crown stop` ends the job, leaving no rank behind."""

import json
import os
import pwd
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from polling import gone_within
from terminal import BackgroundJob

HERE = os.path.dirname(os.path.abspath(__file__))
CROWNRUN = os.path.join(HERE, "..", "..", "launch", "crownrun")
CLIENT = os.path.join(HERE, "attach_client.py")
OTHER_USER = "crown-test-other"
CROWN_RUNTIME = False  # conftest: this process only runs clients, it is none
SEEN = {}  # what the first client saw: the job's ranks' pids


def client_env(job_env: dict) -> dict:
    """The job's settings, without what a launcher's or singleton's MPI
    added: the client is started by no launcher."""
    return {k: v for k, v in job_env.items() if not k.startswith(("OMPI_", "PMIX_", "OPAL_"))}


def result_of(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the client printed no result:\n{output}"
    return json.loads(lines[-1][len("RESULT "):])


def client(env: dict, mode: str, user: str = None, output: list = None) -> dict:
    command = [sys.executable, CLIENT, mode]
    if user is not None:
        command = ["runuser", "-u", user, "--", "env", f"PYTHONPATH={env['PYTHONPATH']}",
                   f"CROWN_DEBUG_DIR={env['CROWN_DEBUG_DIR']}", *command]
    done = subprocess.run(command, env=client_env(env), capture_output=True, text=True,
                          timeout=120, cwd=HERE if user is None else "/")
    print(done.stdout, done.stderr, sep="\n")
    assert done.returncode == 0, f"the client ({mode}) exited {done.returncode}"
    if output is not None:
        output.append(done.stdout)
    return result_of(done.stdout)


@pytest.fixture(scope="module")
def served():
    directory = tempfile.mkdtemp(prefix="crown-attach-")
    os.chmod(directory, 0o700)
    env = dict(os.environ, CROWN_DEBUG_DIR=directory, CROWN_PYTHON=sys.executable,
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = BackgroundJob([CROWNRUN, "-n", "3", "--serve"], env)
    try:
        job.wait_for("crown: serving 3 ranks")
        yield job, env
    finally:
        job.stop()


def test_a_client_drives_the_job_ranks(served):
    job, env = served
    printed = []
    seen = client(env, "first", output=printed)
    assert seen["rank"] >= 3  # a slot of its own, past the launch's ranks
    assert seen["ranks"] == [0, 1, 2]
    assert seen["counted"] == [15, 15, 15]
    assert seen["reduced"] == [3.0] * 4  # among the job's ranks, over their MPI
    assert seen["rdma"] == [20.0, 21.0, 22.0, 23.0]  # rank 2's buffer, read by the client
    assert seen["read"] == [1.5, 2.5, 3.5, 4.5]  # the client's buffer, read by rank 0
    assert seen["kept"] == ["counter"]
    for rank in (0, 1, 2):  # what the actors print comes to the client, as to a launch's terminal
        assert f"[rank {rank}] hello from rank {rank}" in printed[0], printed
    SEEN["pids"] = seen["pids"]


def test_detaching_leaves_the_actors_and_the_next_client_finds_them(served):
    job, env = served
    assert client(env, "again")["counted"] == [16, 16, 16]  # it detached itself
    assert client(env, "exit")["counted"] == [17, 17, 17]  # the interpreter's exit detached it
    again = client(env, "again")
    assert again["counted"] == [18, 18, 18]
    assert again["kept"] == ["counter"]
    # The launch's ranks went to the first client: a later one gets a new process.
    more = client(env, "more")
    assert more["ranks"][0] > 2 and more["pid"] not in SEEN["pids"], more
    assert gone_within([more["pid"]], 10) == []  # stop() ended it


def test_a_second_controller_is_refused_and_a_killed_one_frees_the_job(served):
    job, env = served
    holder = subprocess.Popen([sys.executable, CLIENT, "hold"], env=client_env(env), cwd=HERE,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        assert json.loads(line[len("RESULT "):])["holding"], line
        refused = client(env, "again")["refused"]
        assert "another client" in refused and f"pid {holder.pid}" in refused, refused
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # Its death detached it: the job and its actors live on.
    assert client(env, "again")["counted"] == [19, 19, 19]


def test_another_user_is_refused(served):
    job, env = served
    made = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", OTHER_USER], check=True)
        made = True
    try:
        refused = client(env, "again", user=OTHER_USER)["refused"]
        assert "not to you" in refused, refused  # the job's directory is its user's alone
    finally:
        if made:
            subprocess.run(["userdel", OTHER_USER], check=False)
    assert client(env, "again")["counted"] == [20, 20, 20]


def test_monarchs_workers_and_attach_to_workers(served):
    """run_worker_loop_forever on every rank of a plain mpirun, and
    attach_to_workers from a client; ca="trust_all_connections" is accepted
    but the client still proves the job's token."""
    job, env = served
    port = free_port_pair()
    address = f"tcp://127.0.0.1:{port}"
    program = ("from crown.actor import run_worker_loop_forever; "
               f"run_worker_loop_forever(address={address!r}, ca='trust_all_connections')")
    workers = BackgroundJob(["mpirun", "--oversubscribe", "-n", "2", sys.executable, "-c", program],
                            env)
    try:
        workers.wait_for("crown: serving 2 ranks")
        controller = next(line for line in workers.lines if "controller pid" in line)
        controller = controller.split("controller pid ")[1].split(")")[0]
        seen = client(dict(env, ATTACH_WORKERS=address), "workers")
        assert seen == {"hosts": {"hosts": 1}, "counted": [2, 2]}, seen
        stopped = subprocess.run([sys.executable, "-m", "crown", "stop", "--job",
                                  controller], env=client_env(env),
                                 capture_output=True, text=True, timeout=60)
        assert workers.process.wait(timeout=60) == 0, stopped.stderr
    finally:
        workers.stop()


def free_port_pair() -> int:
    """A port P with P and P + 1 free (the debug server's and the console's)."""
    for _ in range(100):
        port = random.randint(30000, 40000)
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise AssertionError("no two free consecutive ports")


def test_a_stopped_mesh_is_forgotten_and_crown_stop_ends_the_job(served):
    job, env = served
    assert client(env, "stop")["kept"] == []
    stopped = subprocess.run([sys.executable, "-m", "crown", "stop"], env=client_env(env),
                             capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert job.process.wait(timeout=60) == 0
    assert gone_within(SEEN["pids"], 10) == []
