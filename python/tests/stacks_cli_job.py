"""The job that stacks_cli.py looks into: a worker spins in Python, five
calls to it wait behind the spin, and the controller's own program blocks in
C with the GIL held, for BLOCK_SECONDS; then main returns and the job ends
with 0."""
import ctypes
import os
import sys

import crown
from crown.actor import Actor, endpoint

BLOCK_SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
QUEUED_CALLS = 5


class Spinner(Actor):
    @endpoint
    def spin_in_python(self, seconds):
        import time
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    @endpoint
    def ping(self):
        return 1


def main():
    spinners = crown.world_flat().spawn("spinners", Spinner)
    assert spinners.ping.call().get(timeout=20).values() == [1] * len(spinners)
    spinners.slice(ranks=2).spin_in_python.broadcast(BLOCK_SECONDS)
    # Load for crown status to show: calls queued behind the spin, unanswered.
    waiting = [spinners.slice(ranks=2).ping.call_one() for _ in range(QUEUED_CALLS)]
    print(f"controller blocked: pid {os.getpid()}", flush=True)
    ctypes.PyDLL(None).sleep(BLOCK_SECONDS)  # no Python runs in this process meanwhile
    assert [w.get(timeout=60) for w in waiting] == [1] * QUEUED_CALLS
    print("main done", flush=True)


crown.run(main)
