"""remote(): user functions run on every worker, on its shards, recorded like ops.

The worker imports the function by its dotted path, so it must be defined at
module level in a module the workers can import. propagate gives the
outputs' metadata at record time: a function called with fake tensors in
place of the mesh tensors, returning tensors (fake, meta or real: only their
shape, dtype and strides count) shaped like the real outputs. Without
propagate, a callable is its own propagator (fine for torch-only code).
"""

import functools
from typing import Any, Callable, Optional, Union

from ._record import _location, record, suspended


class Remote:
    def __init__(self, fn: Union[str, Callable], propagate: Optional[Callable] = None):
        if isinstance(fn, str):
            path = fn
        else:
            qual = getattr(fn, "__qualname__", "")
            if "<locals>" in qual or "<lambda>" in qual:
                raise ValueError(
                    f"remote({qual}): the workers import remote functions by module path; "
                    "define it at module level")
            path = f"{fn.__module__}.{qual}"
        if isinstance(propagate, str):
            raise NotImplementedError(
                f"remote(propagate={propagate!r}) is not supported yet: pass a function that "
                "returns tensors shaped like the outputs")
        if propagate is None:
            if not callable(fn):
                raise ValueError(
                    f"remote({fn!r}) needs propagate=: a function returning tensors shaped "
                    "like its outputs")
            propagate = fn
        self._path = path
        self._fn = fn if callable(fn) else None
        self._propagate = propagate
        functools.update_wrapper(self, propagate if self._fn is None else self._fn)

    def __call__(self, *args, **kwargs) -> Any:
        with suspended():
            return record(self._path, self._propagate, args, kwargs, location=_location())

    def __repr__(self) -> str:
        return f"crown.remote({self._path})"


def remote(fn: Union[str, Callable, None] = None, *, propagate: Optional[Callable] = None):
    """remote(fn) / remote("pkg.mod.fn", propagate=...) / @remote / @remote(propagate=...)."""
    if fn is None:
        return functools.partial(remote, propagate=propagate)
    return Remote(fn, propagate)
