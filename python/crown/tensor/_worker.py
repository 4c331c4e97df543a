"""What every rank's tensor engine runs for a recorded torch op (the C++
"torch" kernel calls run() on the engine's thread, with the GIL; the
"aten" kernel runs most ops in C++ through crown._aten, which importing
this module installs, and calls prepare() once before its first).

Inputs arrive as torch tensors (those torch ops made, handed back as they
are) or as numpy arrays over the engine's memory (native kernels' results),
which become torch tensors without a copy. torch's generator is seeded once
per process with CROWN_TENSOR_SEED (default 0) plus the rank, so every rank
draws its own numbers and a run repeats them.
"""

import os
from typing import Dict, List

import numpy
import torch

from .. import _context, _crown
from . import _native
from ._execute import Context, execute

if _native.USABLE:  # built (libtorch-dev), for the torch of this process
    from .. import _aten

    _crown.install_native_torch(_aten.api())

_seeded = False


def prepare(rank: int) -> None:
    """Before this process's first torch op: torch's generator seeded for its rank."""
    global _seeded
    if not _seeded:
        _context.front_end_ready.wait(_context.FRONT_END_WAIT_S)  # the first user code here
        torch.manual_seed(int(os.environ.get("CROWN_TENSOR_SEED", "0")) + rank)
        _seeded = True


def run(blob: bytes, inputs: List[object], rank: int, coords: Dict[str, int]) -> List[torch.Tensor]:
    if not _seeded:
        prepare(rank)
    # Not cached by rank: the engines of two meshes on one proc have their own coords.
    context = Context(rank, coords)
    for i, x in enumerate(inputs):
        if type(x) is numpy.ndarray:
            inputs[i] = torch.from_numpy(x)
    return execute(blob, inputs, context)
