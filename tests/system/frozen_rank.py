"""Issue 43, finding 5, under srun (slurm_test.sh): the analogue on one
machine of a host whose link is cut for good. Rank 2 and the slurmstepd of
its step (its parent: srun's daemon on that "host") are frozen (SIGSTOP)
and never continued by this program, so the controller takes rank 2 for
lost once its heartbeats stop and ends, while srun waits for ever on a
daemon that cannot answer. crownrun must end srun within its grace
(CROWN_LAUNCHER_GRACE_MS), naming the host and rank, and exit non-zero.
Usage: frozen_rank.py DIR (writes DIR/frozen.pids: rank 2's pid and its
daemon's, for the test to continue; DIR/frozen.done: when the controller
was done)."""

import os
import signal
import sys
import time

import crown
import crown.actor
from crown.actor import Actor, SupervisionError, endpoint


class Pids(Actor):
    @endpoint
    def pids(self):
        with open(f"/proc/{os.getppid()}/comm") as comm:
            parent = comm.read().strip()
        return os.getpid(), os.getppid(), parent


def on_fault(failure):  # the loss is handled where the call raises
    print(f"fault hook: {failure.report()}", flush=True)


def main():
    signals = sys.argv[1]
    crown.actor.unhandled_fault_hook = on_fault
    victim = crown.world_flat().slice(ranks=2).spawn("pids", Pids)
    pid, daemon, parent = victim.pids.call_one().get(timeout=30)
    assert parent.startswith("slurmstepd"), f"rank 2's parent is {parent}, not slurmstepd"
    with open(os.path.join(signals, "frozen.pids"), "w") as out:
        out.write(f"{pid} {daemon}\n")
    os.kill(daemon, signal.SIGSTOP)
    os.kill(pid, signal.SIGSTOP)
    print(f"rank 2 (pid {pid}) and its slurmstepd (pid {daemon}) frozen", flush=True)
    time.sleep(2)  # past the heartbeat bound the test sets (1 s)
    try:
        victim.pids.call_one().get(timeout=30)
        raise AssertionError("a frozen rank answered")
    except SupervisionError as lost:
        print("rank 2 taken for lost:", lost, flush=True)
    with open(os.path.join(signals, "frozen.done"), "w") as out:
        out.write(f"{time.time():.1f}\n")


crown.run(main)
