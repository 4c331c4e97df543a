"""The client that a SlurmJob runs itself (batch mode, test_slurm_job.py):
inside the allocation, on its first node, it takes the job it runs in from
the cache, drives the job's ranks on both hosts, prints one JSON line of
what it saw and exits 3, which the job must end with."""
import json
import os
import sys

from crown.actor import Actor, endpoint
from crown.job import SlurmJob


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


def main() -> None:
    # Whatever the spec says, the client a job runs gets that job: no sbatch here.
    state = SlurmJob({"workers": 2}).state()
    counters = state.workers.spawn_procs(per_host={"procs": 2}).spawn("counter", Counter, 20)
    print("RESULT " + json.dumps(dict(
        batch=os.environ.get("CROWN_BATCH_JOB"), job_id=os.environ.get("SLURM_JOB_ID"),
        hosts=state.workers.sizes, counted=sorted(counters.incr.call(1).get().values()),
        pids=sorted(counters.pid.call().get().values()))), flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
