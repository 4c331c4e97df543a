"""python_flood: issue 10's flood. The controller sends one-way 4 KiB
messages (broadcast to one actor) as fast as it can for 3.5 s to an actor on
rank 1 that takes 0.1 ms per message; prints the rate it sent at, how long
the actor then took to catch up (the answer to a call sent after the flood,
ORD-1), and the actor's memory growth (peak RSS). Run it twice to compare: with the default CROWN_MAILBOX_LIMIT /
CROWN_MAILBOX_LIMIT_MESSAGES (backpressure), and with both set huge (none):

  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \\
    mpirun --oversubscribe -n 2 -x PYTHONPATH /usr/bin/python3 bench/python_flood.py
  export CROWN_MAILBOX_LIMIT=100000000000 CROWN_MAILBOX_LIMIT_MESSAGES=1000000000
  ... the same mpirun, with -x CROWN_MAILBOX_LIMIT -x CROWN_MAILBOX_LIMIT_MESSAGES
"""

import resource
import time

import numpy as np

import crown
from crown.actor import Actor, endpoint

SECONDS = 3.5
CHUNK = np.ones(4096 // 8)


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Slow(Actor):
    def __init__(self):
        self.handled = 0
        self.base = peak_mb()

    @endpoint
    def work(self, chunk):
        self.handled += 1
        deadline = time.perf_counter() + 0.0001
        while time.perf_counter() < deadline:
            pass

    @endpoint
    def status(self):
        return self.handled, self.base, peak_mb()


def main():
    slow = crown.world_flat().slice(ranks=1).spawn("slow", Slow)
    slow.status.call_one().get()
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < SECONDS:
        slow.work.broadcast(CHUNK)
        sent += 1
    loop = time.monotonic() - start
    handled, base, peak = slow.status.call_one().get(timeout=600)
    behind = time.monotonic() - start - loop
    assert handled == sent
    print(f"sent {sent} messages of 4 KiB in {loop:.2f} s ({sent / loop / 1e3:.1f}k/s); "
          f"the actor caught up {behind:.2f} s later; its peak RSS {base:.0f} -> {peak:.0f} MB")


crown.run(main)
