"""tensor_session: a tensor session as a Monarch notebook writes it.

    mpirun -n 4 python3 examples/python/tensor_session.py

Every rank runs the script up to crown.init(); from there on only the
controller goes on, cell by cell, as a notebook's kernel would, and the
other ranks serve it. So the functions defined below exist only here:
@remote sends them to the procs by value (cloudpickle), closures included.
Each op records on the mesh of its tensors, so under `no_mesh` (plain
local torch) a loss is still detached on its mesh and fetched as a float.
"""
# %% setup: the only cell every rank runs
import torch

import crown
from crown import fetch_shard, no_mesh, remote
from crown.actor import this_host

crown.init()

# %% spawn procs
procs = this_host().spawn_procs(per_host={"gpus": 4})
print(f"procs: {procs}")

# %% data on every proc: its own shard of a linear-regression problem
true_w = [1.0, -2.0, 3.0, 0.5]
with procs.activate():
    X = torch.rand(256, 4) * 4  # each proc draws its own
    y = X @ torch.tensor(true_w)
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)


# %% a closure under @remote, defined in this cell: it travels by value
def standardiser(eps):
    @remote
    def standardise(x):
        return (x - x.mean(0)) / (x.std(0) + eps)  # on each proc, its own shard

    return standardise


standardise = standardiser(1e-6)
with procs.activate():
    X = standardise(X)  # the features, centred on each proc
    y = y - y.mean()
with no_mesh.activate():
    means = fetch_shard(X.mean(0), {"gpus": 2}).get()  # recorded on X's mesh, then fetched
print(f"standardised on every proc by a closure: {bool(means.abs().max() < 1e-5)}")

# %% train: the loss fetched as a float under no_mesh, as a logging cell does
losses = []
for step in range(40):
    with procs.activate():
        loss = ((X @ w - y) ** 2).mean()
        loss.backward()
        w.grad.reduce_("gpus", reduction="avg")  # data parallel: every proc's gradient
        opt.step()
        opt.zero_grad()
    with no_mesh.activate():
        losses.append(float(fetch_shard(loss.detach(), {"gpus": 0}).get()))
    if step % 10 == 0:
        print(f"step {step:2d}  loss {losses[-1]:.4f}")
print(f"loss fell from {losses[0]:.4f} to {losses[-1]:.6f}: {losses[-1] < losses[0] / 100}")

# %% the weights are one tensor on every proc; local code under no_mesh stays local
with no_mesh.activate():
    weights = [fetch_shard(w.detach(), gpus=g).get() for g in range(4)]
    same = all(torch.equal(weights[0], v) for v in weights)
    scale = crown.tensor.inspect(standardise(X).std(0).mean())  # a closure on mesh tensors here too
    local = torch.ones(2) * 3  # plain torch
print(f"every proc holds the same weights: {same}")
print(f"local code stayed local: {type(local) is torch.Tensor}, spread after standardising: "
      f"{float(scale):.3f}")
print("tensor session done")
crown.shutdown()
