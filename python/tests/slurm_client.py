"""A client of a SlurmJob, run by test_slurm_job.py as `python3
slurm_client.py MODE` from a login shell's point of view (started by no
launcher, outside the allocation): it does what MODE says and prints one
JSON line of what it saw. Mode in_batch is the client that a batch job
runs (mode batch submits it): inside the allocation, where its line goes
to the job's output."""
import json
import os
import subprocess
import sys
import time

import crown
from crown.actor import Actor, endpoint
from crown.job import DEFAULT_JOB_PATH, SlurmJob, job_load

WORK = os.environ["SLURM_JOB_TEST_DIR"]
CACHE = os.path.join(WORK, "job_state.pkl")


class Counter(Actor):
    def __init__(self, start: int):
        self.value = start

    @endpoint
    def incr(self, by: int = 1) -> int:
        self.value += by
        return self.value

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def report(**seen) -> None:
    print("RESULT " + json.dumps(seen), flush=True)


def job(**changes) -> SlurmJob:
    settings = dict(ntasks_per_node=2, crownrun=os.environ["CROWNRUN"], exclusive=False,
                    job_start_timeout=120, log_dir=WORK, job_name="crowntest")
    settings.update(changes)
    return SlurmJob({"workers": 2}, **settings)


def main() -> None:
    mode = sys.argv[1]
    if mode == "apply":
        slurm = job()
        state = slurm.state(cached_path=CACHE)
        counters = state.workers.spawn_procs(per_host={"procs": 2}).spawn("counter", Counter, 10)
        report(job_id=slurm.slurm_job_id, hosts=state.workers.sizes,
               counted=sorted(counters.incr.call(5).get().values()),
               pids=sorted(counters.pid.call().get().values()))
    elif mode == "reuse":  # a restarted client: the cached job, its actors
        slurm = job()
        slurm.state(cached_path=CACHE)
        counters = crown.attachment().actor_mesh("counter")
        report(job_id=job_load(CACHE).slurm_job_id,
               counted=sorted(counters.incr.call(1).get().values()))
    elif mode == "attach":  # crown.attach(job) straight from the cached SlurmJob
        counters = crown.attach(job_load(CACHE)).actor_mesh("counter")
        report(counted=sorted(counters.incr.call(1).get().values()))
    elif mode == "changed":  # another spec: the cached job is killed, a new one started
        state = job(ntasks_per_node=1).state(cached_path=CACHE)
        counters = state.workers.procs().spawn("counter", Counter, 0)
        report(job_id=job_load(CACHE).slurm_job_id, ranks=state.workers.ranks,
               pids=sorted(counters.pid.call().get().values()))
    elif mode == "batch":  # the job runs its own client: this script, mode in_batch
        slurm = job()
        slurm.apply(client_script=f"{os.path.abspath(__file__)} in_batch")
        report(job_id=slurm.slurm_job_id, cached=type(job_load(DEFAULT_JOB_PATH)).__name__,
               debug_dir=slurm._debug_dir)
    elif mode == "in_batch":  # inside the allocation, on its first node; exits 3
        # Whatever the spec says, the client a job runs gets that job: no sbatch here.
        state = SlurmJob({"workers": 2}).state()
        counters = state.workers.spawn_procs(per_host={"procs": 2}).spawn("counter", Counter, 20)
        report(batch=os.environ.get("CROWN_BATCH_JOB"), job_id=os.environ.get("SLURM_JOB_ID"),
               hosts=state.workers.sizes, counted=sorted(counters.incr.call(1).get().values()),
               pids=sorted(counters.pid.call().get().values()))
        sys.exit(3)
    elif mode == "kill":
        cached = job_load(CACHE)
        job_id = cached.slurm_job_id
        cached.kill()
        report(job_id=job_id)
    elif mode == "allocation_ends":  # Slurm ends the job under an attached client
        slurm = job()
        state = slurm.state(cached_path=None)
        counters = state.workers.spawn_procs(per_host={"procs": 2}).spawn("counter", Counter, 0)
        counters.incr.call(1).get()
        subprocess.run(["scancel", slurm.slurm_job_id], check=True, timeout=60)
        try:
            for _ in range(600):  # until the loss is seen
                counters.incr.call(1).get(timeout=10)
                time.sleep(0.1)
            report(error=None)
        except Exception as error:  # noqa: BLE001 - what the user sees
            report(error=f"{type(error).__name__}: {error}", job_id=slurm.slurm_job_id,
                   debug_dir=slurm._debug_dir)
    elif mode == "timeout":
        slurm = job(slurm_args=["--begin=now+3600"], job_start_timeout=3)
        try:
            slurm.state(cached_path=None)
            report(error=None)
        except TimeoutError as error:
            report(error=str(error))
    elif mode in ("refused", "never"):  # no such partition; more nodes than it has
        nodes, partition = (1, "nosuchpartition") if mode == "refused" else (3, None)
        try:
            SlurmJob({"workers": nodes}, crownrun=os.environ["CROWNRUN"], exclusive=False,
                     log_dir=WORK, partition=partition).state(cached_path=None)
            report(error=None)
        except RuntimeError as error:
            report(error=str(error))


if __name__ == "__main__":
    main()
