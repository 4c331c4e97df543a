"""The traced job of trace_check.py: a cast to 4 ranks (CROWN_CAST_FANOUT=1
makes its tree a chain, so hops relay it rank to rank), tensor ops with an
allreduce, and an RDMA read from rank 1's memory on rank 3."""
import numpy as np
import torch

import crown
from crown.actor import Actor, endpoint
from crown.rdma import RDMABuffer


class Worker(Actor):
    def __init__(self):
        self.memory = np.arange(1 << 16, dtype=np.uint8)
        self.buffer = RDMABuffer(self.memory)

    @endpoint
    def square(self, x):
        return x * x

    @endpoint
    def handle(self):
        return self.buffer

    @endpoint
    def read(self, handle):
        into = np.zeros(handle.size(), dtype=np.uint8)
        handle.read_into(into).get(timeout=30)
        return int(into[-1])


def main():
    procs = crown.world()
    workers = procs.spawn("workers", Worker)
    for i in range(3):
        print("squares", sorted(workers.square.call(i).get().values()), flush=True)
    handle = workers.slice(procs=1).handle.call_one().get()
    print("rdma read", workers.slice(procs=3).read.call_one(handle).get(), flush=True)
    with procs.activate():
        x = torch.ones(64, 64)
        total = (x @ x).sum().reduce("procs", reduction="sum")
        print("tensor total", float(crown.inspect(total)), flush=True)


crown.run(main)
