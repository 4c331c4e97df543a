"""The worker side of a Call: execute(blob, inputs, context) runs one recorded
op with real torch on this rank's shard. Pure: it touches nothing but its
arguments (and torch's generator, for random ops).

A blob is pickle.dumps((spec, args, kwargs, picks)):
  spec: "ns::name.overload" for a torch op (resolved through torch.ops), a
    dotted path "pkg.mod.func" for a remote function the workers import, or
    a ByValue for one they cannot (a closure, a lambda, a function of
    __main__): the function itself, cloudpickled; a function marked with
    wants_context gets the context as its first argument.
  args, kwargs: the arguments, with Input(i) standing for inputs[i].
  picks: for each result ref of the Call, in order: p >= 0 is position p of
    the flattened output (torch.utils._pytree order); p < 0 is input -p-1
    (an input the op mutated, returned as itself).
"""

import importlib
import pickle
import traceback
from typing import Any, Callable, Dict, List, Tuple

import cloudpickle
import torch
from torch.utils._pytree import tree_flatten, tree_map

from .errors import KernelError


class Input:
    """Placeholder in a blob for the i-th input tensor of a Call."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __reduce__(self):
        return (Input, (self.index,))

    def __repr__(self) -> str:
        return f"Input({self.index})"


def wants_context(fn: Callable) -> Callable:
    """Marks a remote builtin that takes the worker's context (rank, coords) first."""
    fn._crown_context = True
    return fn


class ByValue(str):
    """A remote function's spec when it travels by value: the str is its
    name (module.qualname), for error messages and RemoteException.op;
    .data is the function, cloudpickled once by the controller's Remote.
    Each worker process unpickles one data once (resolve's cache)."""

    def __new__(cls, name: str, data: bytes):
        self = super().__new__(cls, name)
        self.data = data
        return self

    def __reduce__(self):
        return (ByValue, (str(self), self.data))

    def __repr__(self) -> str:
        return f"ByValue({str(self)!r}, {len(self.data)} bytes)"


def encode(spec: str, args, kwargs, picks: List[int]) -> bytes:
    return pickle.dumps((spec, args, kwargs, picks), protocol=pickle.HIGHEST_PROTOCOL)


def op_name(blob: bytes) -> str:
    return pickle.loads(blob)[0]


_resolved: Dict[str, Tuple[Callable, bool]] = {}
# ByValue.data -> (callable, takes_context): keyed by the pickle, not the
# name, which two closures of one function share.
_by_value: Dict[bytes, Tuple[Callable, bool]] = {}
_BY_VALUE_LIMIT = 1024


def resolve(spec: str) -> Tuple[Callable, bool]:
    """(callable, takes_context) for an op spec; cached."""
    if type(spec) is ByValue:
        return _resolve_by_value(spec)
    hit = _resolved.get(spec)
    if hit is not None:
        return hit
    if "::" in spec:
        ns, rest = spec.split("::", 1)
        name, _, overload = rest.partition(".")
        fn = getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
        # The overload's own C++ callable: OpOverload.__call__ only forwards
        # to it, at the cost of a Python call per op.
        fn = getattr(fn, "_op", fn)
    else:
        fn = _import_path(spec)
    hit = (fn, bool(getattr(fn, "_crown_context", False)))
    _resolved[spec] = hit
    return hit


def _resolve_by_value(spec: ByValue) -> Tuple[Callable, bool]:
    hit = _by_value.get(spec.data)
    if hit is None:
        fn = cloudpickle.loads(spec.data)
        hit = (fn, bool(getattr(fn, "_crown_context", False)))
        if len(_by_value) >= _BY_VALUE_LIMIT:
            _by_value.clear()
        _by_value[spec.data] = hit
    return hit


def _import_path(path: str):
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            continue
        # A module-level @remote leaves its Remote under the function's name:
        # the function is what runs here.
        impl = getattr(obj, "_remote_impl", None)
        return obj if impl is None else impl
    raise ImportError(f"cannot resolve the function {path!r} on this worker: "
                      "remote functions must be importable by module path")


class _Decoded:
    """A blob, unpickled once, with what execute() needs to run it fast."""

    __slots__ = ("spec", "args", "kwargs", "picks", "slots", "fn", "takes_context")

    def __init__(self, blob: bytes):
        self.spec = "<undecodable blob>"
        spec, self.args, self.kwargs, self.picks = pickle.loads(blob)
        self.spec = str(spec)  # a ByValue's name: what errors report
        self.fn, self.takes_context = resolve(spec)
        # The common case: placeholders only among the top-level positional
        # arguments, which a list assignment fills (no pytree walk per op).
        self.slots = None
        nested = [a for a in self.args if type(a) is not Input]
        if not any(type(a) is Input for a in tree_flatten((nested, self.kwargs))[0]):
            self.slots = [(i, a.index) for i, a in enumerate(self.args) if type(a) is Input]


_decoded: Dict[bytes, _Decoded] = {}  # a loop records the same blobs again and again
_DECODED_LIMIT = 4096


def decode(blob: bytes) -> _Decoded:
    hit = _decoded.get(blob)
    if hit is None:
        hit = _Decoded(blob)
        # Not a blob that carries a tensor (torch.tensor(data)): the op may
        # hand it out as its result, and a later in-place op change it.
        if not any(isinstance(a, torch.Tensor) for a in tree_flatten((hit.args, hit.kwargs))[0]):
            if len(_decoded) >= _DECODED_LIMIT:
                _decoded.clear()
            _decoded[blob] = hit
    return hit


def execute(blob: bytes, inputs: List[torch.Tensor], context: Any) -> List[torch.Tensor]:
    """Runs the op of a Call; returns the tensors of its results, in order.
    context has .rank (int) and .coords (dict label -> index). Raises
    KernelError (op, message, worker traceback) when the op fails."""
    spec = "<undecodable blob>"
    try:
        op = decode(blob)
        spec, args, kwargs, picks = op.spec, op.args, op.kwargs, op.picks
        if op.slots is not None:
            if op.slots:
                args = list(args)
                for position, index in op.slots:
                    args[position] = inputs[index]
        elif inputs:
            args, kwargs = tree_map(
                lambda a: inputs[a.index] if type(a) is Input else a, (args, kwargs))
        out = op.fn(context, *args, **kwargs) if op.takes_context else op.fn(*args, **kwargs)
        if not picks:
            return []
        if picks == [0] and isinstance(out, torch.Tensor):
            return [out]
        flat = tree_flatten(out)[0]
        return [flat[p] if p >= 0 else inputs[-p - 1] for p in picks]
    except Exception as e:  # noqa: BLE001 - every failure becomes a deferred error
        raise KernelError(spec, f"{type(e).__name__}: {e}", traceback.format_exc()) from e


class Context:
    """A worker's place in its mesh, as execute() sees it."""

    __slots__ = ("rank", "coords")

    def __init__(self, rank: int, coords: Dict[str, int]):
        self.rank = rank
        self.coords = coords

    def __repr__(self) -> str:
        return f"Context(rank={self.rank}, coords={self.coords})"


@wants_context
def output_meta(context, path: str, args, kwargs) -> torch.Tensor:
    """remote(propagate="cached"): on the mesh's first proc, runs the function
    at `path` on its shards and returns the metadata of what it returned
    (tensors as (shape, stride, dtype), the rest as values) pickled into a
    uint8 tensor, for the controller to fetch; elsewhere an empty one."""
    if any(context.coords.values()):
        return torch.empty(0, dtype=torch.uint8)
    flat, tree = tree_flatten(resolve(path)[0](*args, **kwargs))
    metas = [("tensor", tuple(v.shape), tuple(v.stride()), v.dtype) if isinstance(v, torch.Tensor)
             else ("value", v) for v in flat]
    blob = pickle.dumps((metas, tree), protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


@wants_context
def mesh_rank(context, dims, sizes) -> torch.Tensor:
    """This worker's index along dims (labels, raveled row-major in the order
    given; sizes are theirs), as a 0-dim int64 tensor."""
    index = 0
    for d, n in zip(dims, sizes):
        index = index * n + context.coords[d]
    return torch.tensor(index, dtype=torch.long)
