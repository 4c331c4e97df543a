"""remote(): user functions run on every worker, on its shards, recorded like ops.

Which function runs there is decided at its first call, as in Monarch: a
function the workers can import (a module-level function of a module
other than __main__, found under its own name) goes by its dotted path;
any other (a closure, a lambda, a function of __main__: a notebook cell,
or a script's code after crown.init(), which the workers never ran)
travels by value, cloudpickled once then, and its pickle (with what it
captured as it was at that call) is sent with every call and unpickled once
per worker process. propagate gives the outputs' metadata at record time,
as in Monarch:
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
The call records on the mesh of its mesh tensor arguments, or on the active
mesh when it has none.
"""

import functools
import pickle
import sys
from typing import Any, Callable, Dict, Optional, Union

import cloudpickle
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ._execute import ByValue
from ._fetch import fetch_shard
from ._mesh import _location, suspended
from ._record import record
from ._tensor import Tensor
from .errors import RemoteException

_MODES = ("cached", "inspect")


class Remote:
    def __init__(self, fn: Union[str, Callable], propagate: Union[Callable, str, None] = None):
        if not isinstance(fn, str) and not callable(fn):
            raise TypeError(f"remote({fn!r}): expected a function or a dotted path "
                            "'pkg.mod.func'")
        if isinstance(propagate, str) and propagate not in _MODES:
            raise ValueError(
                f"remote(propagate={propagate!r}): the modes are {', '.join(_MODES)} (Monarch's "
                "'mocked' is not there, nor in Monarch), or pass a function that returns "
                "tensors shaped like the outputs")
        if propagate is None:
            propagate = fn if callable(fn) else "cached"
        # What the workers run: a dotted path, or a ByValue; for a function,
        # decided at the first call (a module-level @remote is under its name by then).
        self._path: Optional[str] = fn if isinstance(fn, str) else None
        # The function (Monarch's name: the workers' import of a module-level
        # @remote finds this Remote, and runs what it wraps).
        self._remote_impl = None if isinstance(fn, str) else fn
        self._propagate = propagate
        self._learnt: Dict[Any, Any] = {}  # "cached": argument key -> output metadata
        wrapped = fn if callable(fn) else propagate if callable(propagate) else None
        if wrapped is not None:
            functools.update_wrapper(self, wrapped)

    def __call__(self, *args, **kwargs) -> Any:
        location = _location()
        spec = self._path
        if spec is None:
            spec = self._path = _spec_of(self._remote_impl)
        with suspended():
            propagate = self._propagate
            if propagate == "inspect":
                propagate = _returns_none
            elif propagate == "cached":
                propagate = self._cached(spec, args, kwargs, location)
            return record(spec, propagate, args, kwargs, location=location)

    def _cached(self, spec, args, kwargs, location) -> Callable:
        """A propagator from what the function returned on the first proc."""
        flat, _ = tree_flatten((args, kwargs))
        key = tuple((type(a), a._meta) if isinstance(a, Tensor) else
                    ("tensor", tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else
                    (type(a), repr(a)) for a in flat)
        learnt = self._learnt.get(key)
        if learnt is None:
            probe = record("crown.tensor._execute.output_meta", _empty_bytes,
                           (spec, args, kwargs), {}, location=location)
            try:
                raw = fetch_shard(probe).get()  # the mesh's first proc
            except RemoteException as e:
                if type(e) is not RemoteException:
                    raise  # a lost rank: as it is
                raise RemoteException(str(spec), e.rank, e.message, e.traceback,
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
        if self._path is not None:
            return f"crown.remote({self._path})"
        return f"crown.remote({_name_of(self._remote_impl)})"


def _name_of(fn: Callable) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', None) or type(fn).__qualname__}"


def _import_path_of(fn: Callable) -> Optional[str]:
    """fn's dotted path when the workers import it by that path: it is found
    under its own name in its module (or a @remote of it is), and the module
    is not __main__ (the workers' main is another, or stopped at crown.init())."""
    module_name = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qual, str) or module_name == "__main__":
        return None
    obj = sys.modules.get(module_name)
    for part in qual.split("."):  # "f.<locals>.g" and "<lambda>" are not found
        obj = getattr(obj, part, None)
    if obj is fn or (isinstance(obj, Remote) and obj._remote_impl is fn):
        return f"{module_name}.{qual}"
    return None


def _spec_of(fn: Callable) -> str:
    """What the workers run for fn: its dotted path, or fn by value."""
    path = _import_path_of(fn)
    if path is not None:
        return path
    try:
        data = cloudpickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - cloudpickle raises many kinds
        raise TypeError(
            f"remote({_name_of(fn)}): the workers cannot import it by path, and it cannot be "
            f"pickled by value either ({type(e).__name__}: {e}); define it at module level of "
            "a module the workers import, or keep what it captures picklable") from e
    return ByValue(_name_of(fn), data)


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
