"""An endpoint stuck for good does not turn a successful main into a failed
job: main returns while a worker's actor is still inside its endpoint, and
the job exits 0 within the shutdown bound (SHT-1)."""
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


def main():
    stuck = crown.world_flat().spawn("stuck", Stuck)
    assert stuck.ping.call().get(timeout=10).values() == [1, 1, 1]
    stuck.slice(ranks=slice(1, 3)).hang.broadcast()
    time.sleep(0.5)  # they are inside hang() now
    print("main done", flush=True)


crown.run(main)
