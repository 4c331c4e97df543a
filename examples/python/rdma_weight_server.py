"""rdma_weight_server: a weight server hands out its weights as RDMA buffers.

Written as a Monarch user writes it: the server actor's endpoint does
``return {name: RDMABuffer(w) ...}`` and keeps nothing (the registration
holds each tensor until the buffer is dropped); reader actors on the other
ranks read_into their own tensors, all at once with asyncio.gather. The
server updates its weights in place, and the readers, reading through the
same handles, see the new ones. At the end the controller drops the buffers:
later reads fail with RDMAError, and the server lets go of the memory.

    mpirun -n 4 python3 examples/python/rdma_weight_server.py
"""
import asyncio
import hashlib
import sys

import torch

import crown
from crown.actor import Actor, current_rank, endpoint
from crown.rdma import RDMABuffer, RDMAError

SHAPES = {"embed": (1000, 64), "proj": (64, 64), "bias": (64,)}


def digest(weights):
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(weights[name].numpy().tobytes())
    return h.hexdigest()


def as_bytes(tensor):
    return tensor.view(-1).view(torch.uint8)  # 1-D and contiguous: what a buffer takes


class WeightServer(Actor):
    def __init__(self):
        torch.manual_seed(0)
        self.weights = {name: torch.randn(shape) for name, shape in SHAPES.items()}

    @endpoint
    async def handles(self):
        # Nothing kept: each buffer lives until someone drops it.
        return {name: RDMABuffer(as_bytes(w)) for name, w in self.weights.items()}

    @endpoint
    async def update(self, step):
        torch.manual_seed(100 + step)
        with torch.no_grad():
            for w in self.weights.values():
                w.add_(torch.randn_like(w) * 0.01)  # in place: the same memory, new values
        return digest(self.weights)


class Reader(Actor):
    def __init__(self):
        self.weights = {name: torch.zeros(shape) for name, shape in SHAPES.items()}

    @endpoint
    async def pull(self, handles):
        # Every read starts here, on await, and they run together.
        await asyncio.gather(*(handles[name].read_into(as_bytes(w))
                               for name, w in self.weights.items()))
        return current_rank().rank, digest(self.weights)

    @endpoint
    async def pull_after_drop(self, handles):
        try:
            await handles["bias"].read_into(as_bytes(self.weights["bias"]))
        except RDMAError as e:
            return f"refused: {e}"
        return "read a dropped buffer"


def main():
    procs = crown.world_flat()
    n = len(procs)
    if n < 2:
        sys.exit(f"rdma_weight_server needs a server rank and reader ranks: mpirun -n 4 "
                 f"python3 {sys.argv[0]}")
    server = procs.slice(ranks=0).spawn("weight_server", WeightServer)
    readers = procs.slice(ranks=slice(1, n)).spawn("reader", Reader)
    handles = server.handles.call_one().get()
    size = sum(h.size() for h in handles.values())
    versions = set()
    for step in range(3):
        expected = server.update.call_one(step).get()
        versions.add(expected)
        pulled = readers.pull.call(handles).get()
        seen = [got for _, (rank, got) in pulled.items()]
        assert all(got == expected for got in seen), f"a reader saw stale weights at step {step}"
        print(f"step {step}: {len(seen)} reader(s) read weights version {expected[:12]} "
              f"({size} bytes in {len(handles)} buffers) bit-exact")
    assert len(versions) == 3, "the server's updates did not change its weights"
    for future in [h.drop() for h in handles.values()]:
        future.get()
    refused = [why for _, why in readers.pull_after_drop.call(handles).get().items()
               if why.startswith("refused") and "was dropped" in why]
    print(f"after drop: {len(refused)} of {n - 1} reader(s) refused")
    print(f"rdma_weight_server done on {n} ranks")


crown.run(main)
