"""tensors: distributed tensors driven from the controller.

    mpirun -n 4 python3 examples/python/tensors.py

Inside `procs.activate()`, ordinary torch code runs on every proc at once,
each on its own shard: factories make a different shard per proc, ops are
recorded on the controller and run by each proc's tensor engine, and
results stay there until the controller fetches one (inspect, fetch_shard).
"""
import torch

import crown
from crown import fetch_shard, inspect


def main():
    procs = crown.world()
    outside = torch.ones(512)                          # made outside activate(): a local tensor
    with procs.activate():
        x = torch.rand(512, 512)                      # a different shard on every proc
        y = (x @ x).relu().sum()
        total = y.reduce("procs", reduction="sum")     # allreduce over the dimension "procs"
        shards = [fetch_shard(y, procs=p) for p in range(procs.size("procs"))]
        local = [s.get() for s in shards]
        print(f"y on each proc: {[round(float(v), 1) for v in local]}")
        print(f"total over procs: {float(inspect(total)):.1f} (sum of the shards: "
              f"{float(sum(local)):.1f})")
        assert torch.allclose(inspect(total), sum(local), rtol=1e-5)

        stacked = x[0, :4].reduce("procs", reduction="stack")  # every proc's first row, stacked
        print(f"stacked first rows: shape {tuple(inspect(stacked).shape)}")

        for bad in (lambda: x + outside,               # a local tensor among mesh tensors
                    lambda: x @ torch.ones(3, 3)):     # shapes that do not fit
            try:
                bad()
            except crown.tensor.RecordError as e:
                print(f"refused at record time: {type(e).__name__}")
    print("tensors done")


crown.run(main)
