"""LocalBackend: every rank of a mesh simulated in this process, a reference
executor for the command contract (and the fixture of the Python tests).

Each rank has its own ref table and its own torch generator state (seed +
rank). Deferred errors as the engine has them: a failing command poisons
the refs it defines on that rank with the root cause; a command using a
poisoned ref poisons its own results with the same cause, without running;
fetch raises RemoteException(op, rank, message, traceback, location).
Commands queue at record() and run at flush() (or at fetch()).
"""

import traceback
from typing import Dict, List, Tuple

import torch

from ._commands import Borrow, Call, Delete, Reduce, ReturnBorrow, SwitchStream
from ._execute import Context, execute
from ._mesh import suspended
from .errors import KernelError, RemoteException


class _Poison:
    __slots__ = ("error",)

    def __init__(self, error: RemoteException):
        self.error = error


class LocalFuture:
    def __init__(self, value=None, error=None):
        self._value = value
        self._error = error

    def get(self, timeout=None) -> torch.Tensor:
        if self._error is not None:
            raise self._error
        return self._value

    result = get


class LocalBackend:
    def __init__(self, shape: Dict[str, int], *, seed: int = 0):
        self._shape = dict(shape)
        labels, sizes = list(self._shape), list(self._shape.values())
        self.size = 1
        for s in sizes:
            self.size *= s
        self.contexts: List[Context] = []
        for rank in range(self.size):
            coords, rest = {}, rank
            for label, size in reversed(list(zip(labels, sizes))):
                coords[label] = rest % size
                rest //= size
            self.contexts.append(Context(rank, {k: coords[k] for k in labels}))
        self.refs: List[Dict[int, object]] = [dict() for _ in range(self.size)]
        self._next = 0
        self.pending: List[object] = []
        self.borrows: Dict[int, int] = {}  # borrow id -> its result ref
        self.commands = 0  # every command recorded
        self.flushes = 0
        gen = torch.Generator()
        self._rng = []
        for rank in range(self.size):
            gen.manual_seed(seed + rank)
            self._rng.append(gen.get_state())

    @property
    def shape(self) -> Dict[str, int]:
        return dict(self._shape)

    def new_ref(self) -> int:
        self._next += 1
        return self._next

    def record(self, command) -> None:
        self.commands += 1
        self.pending.append(command)

    def flush(self) -> None:
        with suspended():  # the ranks run real torch in the controller's process
            self._run()

    def _run(self) -> None:
        self.flushes += 1
        batch, self.pending = self.pending, []
        for command in batch:
            if type(command) is Call:
                self._call(command)
            elif type(command) is Reduce:
                self._reduce(command)
            elif type(command) is Delete:
                for table in self.refs:
                    for ref in command.refs:
                        table.pop(ref, None)
            elif type(command) is SwitchStream:
                pass  # one thread runs every stream here, in record order
            elif type(command) is Borrow:
                self.borrows[command.id] = command.result
                for table in self.refs:  # the same tensor (or poison), as the engines do
                    table[command.result] = table[command.source]
            elif type(command) is ReturnBorrow:
                result = self.borrows.pop(command.id, None)
                for table in self.refs:
                    table.pop(result, None)
            else:
                raise TypeError(f"unknown command {command!r}")

    def fetch(self, ref: int, rank: int) -> LocalFuture:
        self.flush()
        with suspended():
            return self._fetch(ref, rank)

    def _fetch(self, ref: int, rank: int) -> LocalFuture:
        value = self.refs[rank].get(ref)
        if value is None:
            return LocalFuture(error=RemoteException("fetch", rank, f"ref {ref} is not defined"))
        if type(value) is _Poison:
            return LocalFuture(error=value.error)
        return LocalFuture(value.detach().clone())

    def live_refs(self) -> int:
        """Refs held on rank 0."""
        return len(self.refs[0])

    # -- execution, rank by rank --------------------------------------------------

    def _call(self, c: Call) -> None:
        saved = torch.get_rng_state()
        try:
            for rank, table in enumerate(self.refs):
                inputs = [table[r] for r in c.inputs]
                poison = next((x for x in inputs if type(x) is _Poison), None)
                if poison is None:
                    torch.set_rng_state(self._rng[rank])
                    try:
                        outs = execute(c.blob, inputs, self.contexts[rank])
                    except KernelError as e:
                        poison = _Poison(RemoteException(e.op, rank, e.message, e.traceback, c.location))
                    else:
                        for ref, t in zip(c.results, outs):
                            table[ref] = t
                    self._rng[rank] = torch.get_rng_state()
                if poison is not None:
                    for ref in c.results:
                        table[ref] = poison
        finally:
            torch.set_rng_state(saved)

    def _groups(self, dims: Tuple[str, ...]) -> List[List[int]]:
        # Ranks sharing their coordinates off dims; within one, ordered by the
        # coordinates along dims, row-major in the mesh's order of the dims
        # (as the engine's communicators are).
        dims = tuple(d for d in self._shape if d in dims)
        groups: Dict[tuple, List[Tuple[tuple, int]]] = {}
        for ctx in self.contexts:
            key = tuple(v for k, v in ctx.coords.items() if k not in dims)
            groups.setdefault(key, []).append((tuple(ctx.coords[d] for d in dims), ctx.rank))
        return [[rank for _, rank in sorted(g)] for g in groups.values()]

    def _reduce(self, c: Reduce) -> None:
        for group in self._groups(tuple(c.dims)):
            srcs = [self.refs[r].get(c.source) for r in group]
            poison = next((x for x in srcs if type(x) is _Poison), None)
            if poison is None and any(x is None for x in srcs):
                poison = _Poison(RemoteException(f"reduce({c.reduction})", group[0],
                                                 f"ref {c.source} is not defined", "", c.location))
            if poison is None:
                try:
                    outs = _collective(srcs, c.reduction, c.scatter)
                except Exception as e:  # noqa: BLE001 - a failed collective poisons its result
                    poison = _Poison(RemoteException(f"reduce({c.reduction})", group[0],
                                                     f"{type(e).__name__}: {e}",
                                                     traceback.format_exc(), c.location))
            for k, rank in enumerate(group):
                table = self.refs[rank]
                if poison is not None:
                    table[c.result] = poison
                elif c.result == c.source:
                    table[c.source].copy_(outs[k])  # in place: same storage, views see it
                else:
                    table[c.result] = outs[k]


def _collective(srcs: List[torch.Tensor], reduction: str, scatter: bool) -> List[torch.Tensor]:
    n = len(srcs)
    if reduction == "stack":
        if scatter:  # all-to-all along dim 0
            chunks = [s.chunk(n, 0) for s in srcs]
            return [torch.cat([chunks[j][k] for j in range(n)], 0) for k in range(n)]
        full = torch.stack(srcs)
        return [full.clone() for _ in range(n)]
    stacked = torch.stack(srcs)
    if reduction == "sum":
        full = stacked.sum(0)
    elif reduction == "avg":
        full = stacked.sum(0) / n if stacked.is_floating_point() else stacked.sum(0) // n
    elif reduction == "product":
        full = stacked.prod(0)
    elif reduction == "min":
        full = stacked.amin(0)
    elif reduction == "max":
        full = stacked.amax(0)
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    full = full.to(srcs[0].dtype)
    if scatter:
        return [c.clone() for c in full.chunk(n, 0)]
    return [full.clone() for _ in range(n)]
