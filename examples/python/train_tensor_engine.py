"""train_tensor_engine: an MLP trained data-parallel, written as
single-machine torch code inside `procs.activate()`.

    mpirun -n 4 python3 examples/python/train_tensor_engine.py

The model, its optimiser and its backward pass are ordinary torch code on
the controller; every op runs on every proc, each on its own quarter of the
batch, and the gradients are averaged over the mesh with `reduce_`. The
loss falls, and the final weights equal those of a local run on the whole
batch (checked at the end).
"""
import sys

import torch

import crown
from crown import inspect, remote

SAMPLES, FEATURES, HIDDEN, STEPS, LR = 4096, 32, 64, 100, 0.3


def dataset():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = torch.tanh(x @ torch.randn(FEATURES, 1, generator=g) / FEATURES**0.5)
    return x, y


def shard_of(index, parts):
    """This proc's rows of the data set (it runs on every proc)."""
    x, y = dataset()
    rows = SAMPLES // parts
    i = int(index)
    return x[i * rows:(i + 1) * rows].clone(), y[i * rows:(i + 1) * rows].clone()


def shard_shape(index, parts):
    rows = SAMPLES // parts
    return torch.empty(rows, FEATURES), torch.empty(rows, 1)


def model():
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, 1))


def main():
    procs = crown.world()
    dims = tuple(procs.sizes)  # every dimension: ("hosts", "procs")
    parts = len(procs)
    with procs.activate():
        net = model()
        with torch.no_grad():  # every proc initialised its own: start from their average
            for p in net.parameters():
                p.reduce_(dims, reduction="avg")
        start = [inspect(p) for p in net.parameters()]
        xb, yb = remote(shard_of, propagate=shard_shape)(procs.tensors().rank(dims), parts)
        opt = torch.optim.SGD(net.parameters(), lr=LR)
        losses = []
        for step in range(STEPS):
            loss = torch.nn.functional.mse_loss(net(xb), yb)
            loss.backward()
            for p in net.parameters():
                p.grad.reduce_(dims, reduction="avg")
            opt.step()
            opt.zero_grad()
            if step % 20 == 0 or step == STEPS - 1:
                losses.append(loss.detach().reduce(dims, reduction="avg"))
        curve = [float(inspect(v)) for v in losses]
        final = [inspect(p) for p in net.parameters()]
    print(f"loss fell from {curve[0]:.4f} to {curve[-1]:.4f} in {STEPS} steps on {parts} procs")

    # The same training on one process, on the whole batch.
    local = model()
    with torch.no_grad():
        for p, v in zip(local.parameters(), start):
            p.copy_(v)
    x, y = dataset()
    opt = torch.optim.SGD(local.parameters(), lr=LR)
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(local(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    diff = max(float((a - b.detach()).abs().max()) for a, b in zip(final, local.parameters()))
    print(f"final weights vs a local full-batch run: max difference {diff:.2e}")
    if diff > 1e-4 or curve[-1] >= curve[0]:
        sys.exit("the data-parallel run does not match the local one")


if __name__ == "__main__":  # bench/tensor_train.py imports its model and data
    crown.run(main)
