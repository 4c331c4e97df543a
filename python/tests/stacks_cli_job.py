"""The job that stacks_cli.py looks into: a worker spins in Python, and then
the controller's own program blocks in C with the GIL held, for
BLOCK_SECONDS; then main returns and the job ends with 0."""
import ctypes
import os
import sys

import crown
from crown.actor import Actor, endpoint

BLOCK_SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15


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
    print(f"controller blocked: pid {os.getpid()}", flush=True)
    ctypes.PyDLL(None).sleep(BLOCK_SECONDS)  # no Python runs in this process meanwhile
    print("main done", flush=True)


crown.run(main)
