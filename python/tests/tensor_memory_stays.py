"""The engines keep their memory under plain mpirun (issue 45, part 3): a
64 MiB out-of-place allreduce (reduce(), then inspect() of one element) run
step after step must not fault in a fresh result every step. Each rank's
minor page faults (getrusage, every thread of the process) are read by an
actor before and after each step: the first step may fault its pages in;
the later ones must fault well under the pages of one result (16,384 of
4 KiB), where glibc's malloc alone maps and zero-fills every result anew.

Prints "faults per step: [...]" per rank and "memory stays" when it holds;
no allocator is preloaded (mpirun, not crownrun)."""

import os
import resource
import sys

import torch

import crown
from crown.actor import Actor, endpoint

MIB = 1 << 20
RESULT_BYTES = 64 * MIB
STEPS = 6
PAGE = resource.getpagesize()
# A later step may fault in at most a quarter of one result's pages: the
# send and small buffers fault a little; a fresh result faults them all.
LATER_STEP_BOUND = RESULT_BYTES // PAGE // 4


class Faults(Actor):
    @endpoint
    def minor(self):
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main():
    if "LD_PRELOAD" in os.environ:
        print(f"an allocator is preloaded ({os.environ['LD_PRELOAD']}): this checks glibc's")
        sys.exit(2)
    procs = crown.world()
    faults = procs.spawn("faults", Faults)
    dims = tuple(procs.sizes)
    with procs.activate():
        x = torch.ones(RESULT_BYTES // 4)
    per_step = []
    for step in range(STEPS):
        before = faults.minor.call().get()
        with procs.activate():
            r = x.reduce(dims)
            value = crown.inspect(r[:1])
            del r
        assert float(value[0]) == len(procs), value
        after = faults.minor.call().get()
        per_step.append([a - b for a, b in zip(after.values(), before.values())])
    by_rank = list(zip(*per_step))
    for rank, steps in enumerate(by_rank):
        print(f"rank {rank} faults per step: {list(steps)}")
    worst = max(max(steps[1:]) for steps in by_rank)
    if worst > LATER_STEP_BOUND:
        print(f"fresh pages every step: {worst} faults in a later step "
              f"(bound {LATER_STEP_BOUND}; one result is {RESULT_BYTES // PAGE} pages)")
        sys.exit(1)
    print(f"memory stays: at most {worst} faults in a step after the first "
          f"(bound {LATER_STEP_BOUND})")


crown.run(main)
