"""weight_sync: a trainer publishes its weights as RDMA buffers, generators pull them.

The TorchForge pattern over crown.rdma: after each training step the trainer
actor (rank 0's proc) registers every parameter as an RDMABuffer and returns
the handles; the controller passes the handles (never the bytes) to the
generator actors on the other ranks, which read_into their own copies of the
model, one-sided. Every generator then checks its weights bit for bit
against the trainer's.

    mpirun -n 4 python3 examples/python/weight_sync.py
"""
import hashlib
import sys

import torch

import crown
from crown.actor import Actor, current_rank, endpoint
from crown.rdma import RDMABuffer


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 256))


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


class Trainer(Actor):
    def __init__(self):
        self.model = make_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.buffers = []

    @endpoint
    def step(self, step):
        torch.manual_seed(100 + step)
        x, y = torch.randn(64, 512), torch.randn(64, 256)
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        # Last step's handles are dropped (no generator reads them any more);
        # each parameter's memory is published as a flat byte view.
        for buffer in self.buffers:
            buffer.drop().get()
        self.buffers = [RDMABuffer(p.data.view(-1)) for p in self.model.parameters()]
        return float(loss), self.buffers, digest(self.model)


class Generator(Actor):
    def __init__(self):
        self.model = make_model()
        with torch.no_grad():
            for p in self.model.parameters():
                p.zero_()  # nothing in common with the trainer but the shapes

    @endpoint
    def pull(self, handles):
        futures = [h.read_into(p.data.view(-1)) for h, p in zip(handles, self.model.parameters())]
        for f in futures:
            f.get()
        return current_rank().rank, digest(self.model)


def main():
    procs = crown.world_flat()
    n = len(procs)
    if n < 2:
        sys.exit("weight_sync needs a trainer rank and at least one generator rank: "
                 f"mpirun -n 4 python3 {sys.argv[0]}")
    trainer = procs.slice(ranks=0).spawn("trainer", Trainer)
    generators = procs.slice(ranks=slice(1, n)).spawn("generator", Generator)
    for step in range(3):
        loss, handles, expected = trainer.step.call_one(step).get()
        pulled = generators.pull.call(handles).get()
        for _, (rank, got) in pulled.items():
            assert got == expected, f"rank {rank} pulled weights that differ at step {step}"
        print(f"step {step}: loss {loss:.4f}, {sum(h.size() for h in handles)} bytes in "
              f"{len(handles)} buffers pulled bit-exact by {n - 1} generator(s)")
    print(f"weight_sync done on {n} ranks")


crown.run(main)
