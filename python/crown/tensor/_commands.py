"""The commands the controller records for the workers' tensor engines.

Every rank of a mesh runs every command, in record order (ORD-1), on its own
shard. Refs are ints allocated by the backend; the same ref names the same
logical tensor on every rank.
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(slots=True)
class Call:
    """Run one op on every rank.

    results: the refs this command (re)defines, in the order execute()
    returns their tensors. Fresh refs name new tensors; a ref that is also in
    inputs names an input the op mutated (in-place, out=), which keeps its
    ref (no new ref is made) and is poisoned if the op fails.
    blob: the pickled op and arguments, for execute() (crown.tensor._execute).
    inputs: the refs the op reads, substituted for the placeholders in blob.
    location: the controller's file:line that recorded the op.
    """

    results: List[int]
    blob: bytes
    inputs: List[int]
    location: str


@dataclass(slots=True)
class Reduce:
    """A collective over the named mesh dimensions.

    reduction: sum, avg, min, max, product or stack (allgather along a new
    leading dim of size prod(dims), ranks in row-major order of their
    coordinates along dims, in the mesh's order of the dims). scatter=True: the
    reduced tensor is split along dim 0 into prod(dims) equal chunks and each
    rank keeps its own (reduce-scatter; with stack, all-to-all). In place
    (reduce_): result == source.
    """

    result: int
    source: int
    dims: Tuple[str, ...]
    reduction: str
    scatter: bool
    location: str
    source_meta: Optional[tuple] = None  # the source's (size, stride, offset, dtype, device)


@dataclass(slots=True)
class Delete:
    """Forget these refs on every rank (their controller tensors died or were dropped)."""

    refs: List[int]


@dataclass(slots=True)
class SwitchStream:
    """The commands after this one run on stream `stream` (0: the main stream)."""

    stream: int


@dataclass(slots=True)
class Borrow:
    """Lends `source` (as it is at this point of stream `lender`) to the
    stream of this command as `result`, until ReturnBorrow(id)."""

    id: int
    source: int
    result: int
    lender: int
    mutable: bool


@dataclass(slots=True)
class ReturnBorrow:
    """Ends borrow `id`: its result ref goes, and the lender's later commands
    wait until the borrower's earlier ones have run."""

    id: int


REDUCTIONS = ("sum", "avg", "min", "max", "product", "stack")
