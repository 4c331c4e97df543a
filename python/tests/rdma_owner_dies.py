"""The owner of an RDMA buffer dies in the middle of transfers from it (run
under mpirun with recovery on, which keeps the survivors alive): the read in
flight fails with SupervisionError within the heartbeat bound, none hangs,
later reads of its buffers fail at once, and a buffer of a survivor still
reads."""
import os
import threading
import time

import numpy as np

import crown
import print_faults
from crown.actor import Actor, SupervisionError, endpoint
from crown.rdma import RDMABuffer

N = 128 << 20


class Owner(Actor):
    @endpoint
    def publish(self, seed):
        self.memory = np.full(N, seed, dtype=np.uint8)
        self.buffer = RDMABuffer(self.memory)
        return self.buffer

    @endpoint
    def die_in(self, seconds):
        threading.Timer(seconds, lambda: os._exit(9)).start()


def main():
    print_faults.install()
    owners = crown.world_flat().spawn("owner", Owner)
    doomed = owners.slice(ranks=2).publish.call_one(2).get(timeout=60)
    survivor = owners.slice(ranks=1).publish.call_one(1).get(timeout=60)
    into = np.zeros(N, dtype=np.uint8)
    doomed.read_into(into).get(timeout=60)
    assert (into == 2).all()

    owners.slice(ranks=2).die_in.call_one(0.3).get(timeout=30)
    died_after = time.monotonic() + 0.3
    reads = 0
    while True:
        start = time.monotonic()
        try:
            doomed.read_into(into, timeout=60).get(timeout=60)
            reads += 1
            assert time.monotonic() < died_after + 30, "reads of a dead owner went on succeeding"
        except SupervisionError as e:
            now = time.monotonic()
            print(f"read failed with SupervisionError {now - died_after:.2f} s after the death "
                  f"(the read had run {now - start:.2f} s; {reads} whole reads before): {e}")
            assert now - died_after < 10, "slower than the heartbeat bound"
            break
    start = time.monotonic()
    try:
        doomed.read_into(into).get(timeout=30)
        raise SystemExit("a read of a dead owner's buffer succeeded")
    except SupervisionError:
        print(f"a later read failed in {time.monotonic() - start:.3f} s")
    survivor.read_into(into).get(timeout=60)
    assert (into == 1).all()
    print("a survivor's buffer still reads")


crown.run(main)
