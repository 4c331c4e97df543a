"""An endpoint or an __init__ stuck for good does not turn a successful main
into a failed job: main returns while a worker's actor is still inside its
endpoint, and another's constructor never returns, and the job exits 0
within the shutdown bound (SHT-1)."""
import time

import crown
from crown.actor import Actor, endpoint


class Stuck(Actor):
    @endpoint
    def hang(self):
        while True:  # Python that never returns (sleeps, so the GIL is free)
            time.sleep(1)

    @endpoint
    def ping(self):
        return 1


class StuckBirth(Actor):
    def __init__(self):
        while True:  # a constructor that never returns (a hung download, say)
            time.sleep(1)

    @endpoint
    def ping(self):
        return 1


def main():
    crown.world_flat().slice(ranks=2).spawn("stuck_birth", StuckBirth)  # returns at once
    stuck = crown.world_flat().slice(ranks=slice(0, 2)).spawn("stuck", Stuck)
    assert stuck.ping.call().get(timeout=10).values() == [1, 1]
    stuck.slice(ranks=1).hang.broadcast()
    time.sleep(0.5)  # they are inside hang() now
    print("main done", flush=True)


crown.run(main)
