"""fault_tolerant_training: data-parallel training that survives a lost rank.

    mpirun --enable-recovery -n 4 python3 examples/python/fault_tolerant_training.py
    mpirun --enable-recovery -n 4 python3 examples/python/fault_tolerant_training.py --respawn

It needs mpirun's --enable-recovery (or OMPI_MCA_orte_enable_recovery=1 in
the environment; crownrun passes it): without it, mpirun ends every rank
as soon as one dies.

Every Trainer makes the same synthetic regression data set and computes the
gradient of the loss on its shard of it, the samples i with
i % shards == index. Each step the controller sends the weights and the
live ranks, averages the gradients and takes an SGD step. At step
KILL_STEP rank VICTIM's process SIGKILLs itself (a node lost, in
miniature). That step's call raises SupervisionError; the controller goes on
with trainers.survivors(), the mesh of the ranks still alive, which
re-shard the data among themselves; it runs the step again and goes on.
With --respawn it replaces the lost rank instead (ProcMesh.respawn_lost(),
a new process started by MPI_Comm_spawn), spawns trainers on the mesh at
full size again, and the data is sharded over four ranks as before.
The loss keeps falling.
"""
import os
import signal
import sys

import torch

import crown
from crown.actor import Actor, SupervisionError, current_rank, endpoint

FEATURES = 16
SAMPLES = 8192
STEPS = 40
KILL_STEP = 15
VICTIM = 1  # a rank in the middle: the survivors are no strided slice


def make_model():
    torch.manual_seed(0)  # the controller's and the trainers' models start alike
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 1))


class Trainer(Actor):
    def __init__(self, victim):
        self.rank = current_rank().rank
        self.victim = victim  # the rank that dies at KILL_STEP
        data = torch.Generator().manual_seed(1234)  # the same data set on every rank
        self.x = torch.randn(SAMPLES, FEATURES, generator=data)
        true_weights = torch.randn(FEATURES, 1, generator=data)
        self.y = self.x @ true_weights + 0.01 * torch.randn(SAMPLES, 1, generator=data)
        self.model = make_model()

    @endpoint
    def gradients(self, state, step, ranks):
        """Loads the weights; returns (loss, gradients) on this rank's shard
        of the data, split among the live `ranks`."""
        if step == KILL_STEP and self.rank == self.victim:
            os.kill(os.getpid(), signal.SIGKILL)
        shard, shards = ranks.index(self.rank), len(ranks)
        x, y = self.x[shard::shards], self.y[shard::shards]
        self.model.load_state_dict(state)
        self.model.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        return loss.item(), [p.grad for p in self.model.parameters()]


def on_fault(failure):
    """A lost process is a supervision event (as in Monarch): this program
    handles it where the call raises, so the hook only says so (the default
    would end the job)."""
    print(f"fault hook: {failure.report()}", flush=True)


def main(respawn):
    crown.actor.unhandled_fault_hook = on_fault
    procs = crown.world_flat()
    if len(procs) <= VICTIM:
        sys.exit(f"fault_tolerant_training needs at least {VICTIM + 1} ranks (rank {VICTIM} "
                 f"dies), it has {len(procs)}: mpirun --enable-recovery -n 4 python3 {sys.argv[0]}")
    trainers = procs.spawn("trainer", Trainer, VICTIM)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    print(f"training on {len(trainers)} ranks; rank {VICTIM} dies at step {KILL_STEP}")
    loss = before_loss = None
    step = 0
    while step < STEPS:
        ranks = trainers.shape.ranks()
        try:
            replies = trainers.gradients.call(model.state_dict(), step, ranks).get(timeout=60)
        except SupervisionError as e:
            before_loss = loss
            if respawn:
                procs = procs.respawn_lost()  # the weights travel with each step's call
                trainers = procs.spawn("trainer-respawned", Trainer, VICTIM)
                print(f"step {step}: lost rank {e.rank} ({e.host}): replaced, carrying on "
                      f"with {len(trainers)} ranks {trainers.shape.ranks()}")
            else:
                trainers = trainers.survivors()
                print(f"step {step}: lost rank {e.rank} ({e.host}): carrying on with "
                      f"{len(trainers)} ranks {trainers.shape.ranks()}, the data re-sharded "
                      "among them")
            continue  # the same step again, on the survivors or the replaced mesh
        results = replies.values()
        for param, grads in zip(model.parameters(), zip(*(g for _, g in results))):
            param.grad = torch.stack(grads).mean(dim=0)  # the all-reduce, on the controller
        optimizer.step()
        loss = sum(loss for loss, _ in results) / len(results)
        print(f"step {step:3d}  ranks {len(trainers)}  loss {loss:.4f}")
        step += 1
    print(f"loss before the failure {before_loss:.4f}, final loss {loss:.4f} on "
          f"{len(trainers)} ranks")
    if loss < before_loss:
        print("the loss kept falling after the failure")


crown.run(main, "--respawn" in sys.argv[1:])
