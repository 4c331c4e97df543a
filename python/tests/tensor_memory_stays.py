"""The engines keep their memory under plain mpirun (issue 45, part 3): a
64 MiB out-of-place allreduce (reduce(), then inspect() of one element) run
step after step must not fault in a fresh result every step. Each rank's
minor page faults (getrusage, every thread of the process) are read by an
actor before and after each step: the first step may fault its pages in;
each later one must fault fewer pages than one result holds (16,384 of
4 KiB). glibc's malloc alone maps and zero-fills every result anew (24,578
faults a step before issue 45: the result and MPI's own 32 MiB temporary);
the engines' recycled memory leaves MPI's temporary alone (8,194), and
CROWN_MALLOC=keep that too (0).

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
# A later step faults fewer pages than one result holds: a fresh result
# alone would fault them all.
LATER_STEP_BOUND = RESULT_BYTES // PAGE - 1


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
