"""procs.stacks() (issue 15): the stacks of every thread of every rank, while
one rank holds the GIL inside a C call (libc's sleep called through
ctypes.PyDLL, which keeps the GIL), within 2 s; alike stacks merged with
their ranks, the odd one out on its own; native frames from eu-stack."""
import ctypes
import time

import crown
from crown.actor import Actor, endpoint


class Spinner(Actor):
    @endpoint
    def hold_the_gil(self, seconds):
        ctypes.PyDLL(None).sleep(seconds)  # C with the GIL held: no Python thread runs here

    @endpoint
    def ping(self):
        return 1


def main():
    procs = crown.world_flat()
    spinners = procs.spawn("spinners", Spinner)
    assert spinners.ping.call().get(timeout=20).values() == [1, 1, 1, 1]
    spinners.slice(ranks=2).hold_the_gil.broadcast(6)
    time.sleep(0.5)  # rank 2 is inside the C call now
    started = time.monotonic()
    stacks = procs.stacks(timeout=5)
    took = time.monotonic() - started
    print(stacks, flush=True)
    print(f"stacks of 4 ranks in {took:.2f} s", flush=True)
    assert took < 2.0, took
    assert sorted(stacks.by_rank) == [0, 1, 2, 3]
    assert all(not reply.error for reply in stacks.by_rank.values()), stacks.by_rank
    held = [frames for frames in stacks.by_rank[2].threads() if any("hold_the_gil" in f for f in frames)]
    assert held, stacks.by_rank[2].python
    odd = [ranks for ranks, frames in stacks.merged() if any("hold_the_gil" in f for f in frames)]
    assert odd == [[2]], odd
    # The workers' main threads all serve (crown.init): one entry for the three.
    assert any(ranks == [1, 2, 3] and any(" in init" in f for f in frames)
               for ranks, frames in stacks.merged()), stacks.merged()
    assert "rank 2:" in str(stacks) and "ranks " in str(stacks)
    native = procs.slice(ranks=slice(1, 3)).stacks(native=True, timeout=10)
    for rank in (1, 2):  # eu-stack's own output: a block per thread (launch/install-deps has it)
        assert "TID " in native.by_rank[rank].native, native.by_rank[rank].native[:500]
    print(f"native stacks of rank 1:\n{native.by_rank[1].native[:400]}", flush=True)
    print("stacks done", flush=True)


crown.run(main)
