"""remote(): user functions run on every worker, on its shards, recorded like ops.

The worker imports the function by its dotted path, so it must be defined at
module level in a module the workers can import. propagate gives the
outputs' metadata at record time, as in Monarch:
  a callable  called with fake tensors in place of the mesh tensors, it
              returns tensors (fake, meta or real: only their shape, dtype
              and strides count) shaped like the real outputs;
  "cached"    the function runs once on the mesh's first proc, on its
              shards, and the controller fetches what it returned (shapes,
              dtypes, other values); cached for arguments of the same
              metadata and constants. The default for a dotted path;
  "inspect"   the function's result is not wanted: the call returns None
              (a function run for what it does on the workers).
Without propagate, a callable is its own propagator (fine for torch-only code).
"""

import functools
import pickle
from typing import Any, Callable, Dict, Union

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._fetch import fetch_shard
from ._mesh import _location, suspended
from ._record import record
from ._tensor import Tensor
from .errors import RemoteException

_MODES = ("cached", "inspect")


class Remote:
    def __init__(self, fn: Union[str, Callable], propagate: Union[Callable, str, None] = None):
        if isinstance(fn, str):
            path = fn
        else:
            qual = getattr(fn, "__qualname__", "")
            if "<locals>" in qual or "<lambda>" in qual:
                raise ValueError(
                    f"remote({qual}): the workers import remote functions by module path; "
                    "define it at module level")
            path = f"{fn.__module__}.{qual}"
        if isinstance(propagate, str) and propagate not in _MODES:
            raise ValueError(
                f"remote(propagate={propagate!r}): the modes are {', '.join(_MODES)} (Monarch's "
                "'mocked' is not there, nor in Monarch), or pass a function that returns "
                "tensors shaped like the outputs")
        if propagate is None:
            propagate = fn if callable(fn) else "cached"
        self._path = path
        self._fn = fn if callable(fn) else None
        self._propagate = propagate
        self._learnt: Dict[Any, Any] = {}  # "cached": argument key -> output metadata
        wrapped = self._fn if self._fn is not None else propagate if callable(propagate) else None
        if wrapped is not None:
            functools.update_wrapper(self, wrapped)

    def __call__(self, *args, **kwargs) -> Any:
        location = _location()
        with suspended():
            propagate = self._propagate
            if propagate == "inspect":
                propagate = _returns_none
            elif propagate == "cached":
                propagate = self._cached(args, kwargs, location)
            return record(self._path, propagate, args, kwargs, location=location)

    def _cached(self, args, kwargs, location) -> Callable:
        """A propagator from what the function returned on the first proc."""
        flat, _ = tree_flatten((args, kwargs))
        key = tuple((type(a), a._meta) if isinstance(a, Tensor) else
                    ("tensor", tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else
                    (type(a), repr(a)) for a in flat)
        learnt = self._learnt.get(key)
        if learnt is None:
            probe = record("crown.tensor._execute.output_meta", _empty_bytes,
                           (self._path, args, kwargs), {}, location=location)
            try:
                raw = fetch_shard(probe).get()  # the mesh's first proc
            except RemoteException as e:
                if type(e) is not RemoteException:
                    raise  # a lost rank: as it is
                raise RemoteException(self._path, e.rank, e.message, e.traceback,
                                      location) from None
            probe.drop()
            learnt = self._learnt[key] = pickle.loads(raw.numpy().tobytes())
        metas, tree = learnt

        def from_metadata(*_args, **_kwargs):
            out = [torch.empty_strided(m[1], m[2], dtype=m[3]) if m[0] == "tensor" else m[1]
                   for m in metas]
            return tree_unflatten(out, tree)

        return from_metadata

    def __repr__(self) -> str:
        return f"crown.remote({self._path})"


def _returns_none(*args, **kwargs) -> None:
    return None


def _empty_bytes(*args, **kwargs) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8)  # the first proc's holds more: only it is fetched


def remote(fn: Union[str, Callable, None] = None, *,
           propagate: Union[Callable, str, None] = None):
    """remote(fn) / remote("pkg.mod.fn", propagate=...) / @remote / @remote(propagate=...)."""
    if fn is None:
        return functools.partial(remote, propagate=propagate)
    return Remote(fn, propagate)
