"""train_data_parallel: a small torch model trained data-parallel on every rank.

    mpirun -n 4 python3 examples/python/train_data_parallel.py

Each rank's Trainer holds its shard of a synthetic regression data set; every
step the controller broadcasts the weights, each trainer computes the
gradient of the loss on its shard, and the controller averages the gradients
and takes an SGD step. The loss falls and is printed.
"""
import torch

import crown
from crown.actor import Actor, current_rank, current_size, endpoint

FEATURES = 16
SAMPLES_PER_RANK = 2048


def make_model():
    torch.manual_seed(0)  # the controller's and the trainers' models start alike
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 1))


class Trainer(Actor):
    def __init__(self, seed):
        rank = current_rank().rank
        generator = torch.Generator().manual_seed(seed)  # the same true weights everywhere
        true_weights = torch.randn(FEATURES, 1, generator=generator)
        shard = torch.Generator().manual_seed(seed + 1 + rank)  # this rank's own samples
        self.x = torch.randn(SAMPLES_PER_RANK, FEATURES, generator=shard)
        noise = 0.01 * torch.randn(SAMPLES_PER_RANK, 1, generator=shard)
        self.y = self.x @ true_weights + noise
        self.model = make_model()

    @endpoint
    def gradients(self, state):
        """Loads the weights, returns (loss, gradients) on this shard."""
        self.model.load_state_dict(state)
        self.model.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        return loss.item(), [p.grad for p in self.model.parameters()]


def main():
    procs = crown.world()
    trainers = procs.spawn("trainer", Trainer, 1234)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    print(f"training on {len(procs)} ranks, {len(procs) * SAMPLES_PER_RANK} samples")
    first = last = None
    for step in range(60):
        replies = trainers.gradients.call(model.state_dict()).get().values()
        losses = [loss for loss, _ in replies]
        for param, grads in zip(model.parameters(), zip(*(g for _, g in replies))):
            param.grad = torch.stack(grads).mean(dim=0)  # the all-reduce, on the controller
        optimizer.step()
        loss = sum(losses) / len(losses)
        first = loss if first is None else first
        last = loss
        if step % 10 == 0 or step == 59:
            print(f"step {step:3d}  loss {loss:.4f}")
    print(f"loss fell from {first:.4f} to {last:.4f}")


crown.run(main)
