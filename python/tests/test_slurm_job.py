"""SlurmJob against a real Slurm (issue 46, part 3): run by
tests/system/slurm_job_test.sh, which starts a private cluster of two
simulated hosts and exports SLURM_CONF, CROWNRUN and SLURM_JOB_TEST_DIR.
Each client is a plain `python3 slurm_client.py MODE` (no launcher, on
neither host: it attaches over TCP): apply and drive the job on both hosts, a
restarted client reusing it and finding its actors, a changed spec
replacing it, kill() leaving nothing in squeue or ps, the start timeout,
Slurm's refusal, the allocation ending under a client, and batch mode (the
job running its own client)."""

import glob
import json
import os
import subprocess
import sys

from polling import eventually, gone_within

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "slurm_client.py")
CROWN_RUNTIME = False  # conftest: this process only runs clients, it is none


def client(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "SLURM_J"))}
    env["SLURM_JOB_TEST_DIR"] = os.environ["SLURM_JOB_TEST_DIR"]
    done = subprocess.run([sys.executable, CLIENT, mode], env=env, capture_output=True,
                          text=True, timeout=240, cwd=os.environ["SLURM_JOB_TEST_DIR"])
    print(done.stdout, done.stderr, sep="\n")
    assert done.returncode == 0, f"the client ({mode}) exited {done.returncode}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the client ({mode}) printed no result"
    return json.loads(lines[-1][len("RESULT "):])


def slurm_dirs() -> str:
    """Where a SlurmJob makes its jobs' debug directories (its default)."""
    return os.path.join(os.environ["HOME"], ".crown", "slurm")


def queued() -> list:
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return out.split()


def test_apply_reuse_replace_and_kill():
    applied = client("apply")
    assert applied["hosts"] == {"hosts": 2}
    assert applied["counted"] == [15, 15, 15, 15]  # 2 procs on each of the 2 hosts
    assert queued() == [applied["job_id"]]
    reused = client("reuse")  # a new client process: the same job, its actors alive
    assert reused == {"job_id": applied["job_id"], "counted": [16, 16, 16, 16]}
    assert client("attach")["counted"] == [17, 17, 17, 17]
    changed = client("changed")
    assert changed["job_id"] != applied["job_id"] and len(changed["ranks"]) == 2
    assert eventually(queued, lambda jobs: jobs == [changed["job_id"]], 30) == [changed["job_id"]]
    assert gone_within(applied["pids"], 30) == []  # the replaced job's ranks
    killed = client("kill")
    assert killed["job_id"] == changed["job_id"]
    assert queued() == []
    assert gone_within(changed["pids"], 30) == []  # its ranks too
    assert eventually(lambda: os.listdir(slurm_dirs()), lambda left: not left, 10) == []


def test_the_allocation_ending_under_a_client_is_said():
    seen = client("allocation_ends")
    assert seen["error"] is not None and "rank" in seen["error"], seen
    assert eventually(queued, lambda jobs: jobs == [], 30) == []
    # The client exits without kill(): the job's script removed its directory.
    assert seen["debug_dir"].startswith(slurm_dirs())
    assert eventually(lambda: os.path.exists(seen["debug_dir"]), lambda left: not left, 30) is False


def test_the_start_timeout_cancels_the_job():
    seen = client("timeout")
    assert "did not start serving within job_start_timeout=3" in seen["error"], seen
    assert "it is cancelled" in seen["error"]
    assert queued() == []


def test_slurm_refusing_the_job_is_said():
    before = set(os.listdir(slurm_dirs())) if os.path.isdir(slurm_dirs()) else set()
    seen = client("refused")
    assert seen["error"].startswith("Slurm refused the job"), seen
    assert "nosuchpartition" in seen["error"] or "partition" in seen["error"]
    assert queued() == []
    assert set(os.listdir(slurm_dirs())) == before  # no directory made for it is left


def test_a_job_slurm_will_never_start_is_cancelled_and_said():
    seen = client("never")  # 3 nodes of a 2-node partition
    assert "Slurm will not start the job" in seen["error"], seen
    assert "reason Partition" in seen["error"]  # PartitionNodeLimit or PartitionConfig
    assert queued() == []


def slurm_job_field(job_id: str, field: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return next(word.split("=", 1)[1] for word in out.split() if word.startswith(field + "="))


def test_batch_mode_runs_the_client_in_the_allocation_and_ends_with_it():
    submitted = client("batch")
    job_id = submitted["job_id"]
    assert submitted["cached"] == "BatchJob"
    assert eventually(queued, lambda jobs: job_id not in jobs, 120) == []
    outputs = glob.glob(os.path.join(os.environ["SLURM_JOB_TEST_DIR"], f"slurm_{job_id}_*.out"))
    assert len(outputs) == 1, outputs
    with open(outputs[0]) as f:
        output = f.read()
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the batch client printed no result:\n{output}"
    seen = json.loads(lines[-1][len("RESULT "):])
    assert seen["batch"] == "1" and seen["job_id"] == job_id, seen
    assert seen["hosts"] == {"hosts": 2} and seen["counted"] == [21, 21, 21, 21], seen
    # The job ends with its client, and with the client's exit code.
    assert (slurm_job_field(job_id, "JobState"), slurm_job_field(job_id, "ExitCode")) == (
        "FAILED", "3:0"), output
    assert gone_within(seen["pids"], 30) == []
    assert submitted["debug_dir"].startswith(slurm_dirs())
    assert not os.path.exists(submitted["debug_dir"])  # the job's script removed it
