"""Values the controller knows: a small tensor made only from constants
(Adam's step count) keeps its value on the controller, so .item() on it
needs no fetch; any other write forgets it. _record.record() calls
_track_known after each op, _op_cache.dispatch() _known_values for item().
In the recording layer it sits on _mesh and _tensor (see _hooks)."""

from __future__ import annotations

import math

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _mesh, _tensor


# --- values the controller knows --------------------------------------------------

_KNOWN_LIMIT = 64  # elements: small bookkeeping tensors (Adam's step count), not data


def _known_values(args, kwargs):
    """(args, kwargs) with every mesh tensor replaced by its known value, or
    None when one of them has none."""
    flat, tree = tree_flatten((args, kwargs))
    for i, a in enumerate(flat):
        if isinstance(a, _tensor.Tensor):
            if a._known is None:
                return None
            flat[i] = a._known
    return tree_unflatten(flat, tree)


def _track_known(fake_fn, flat, tree, wrappers, flat_out, written, lifted) -> None:
    """Keeps the controller's own copy of small tensors made from constants
    alone: torch.tensor(data) inside activate() (`lifted`: the same data on
    every rank) and deterministic ops on such tensors only. Their values are
    the same on every rank, so .item() on one needs no fetch; this is how
    torch.optim.Adam's step count works. A write from any other input
    forgets the copy."""
    outs = [o for o in flat_out if isinstance(o, _tensor.Tensor)]
    if lifted is None and not any(w._known is not None for w in wrappers):
        return  # the common case: nothing known, nothing to forget
    aten = lifted is not None or isinstance(fake_fn, torch._ops.OpOverload)  # not propagate=
    ok = aten and (lifted is not None or all(w._known is not None for w in wrappers))
    ok = ok and torch.Tag.nondeterministic_seeded not in getattr(fake_fn, "tags", ())
    ok = ok and all(math.prod(o._meta[0]) <= _KNOWN_LIMIT for o in outs)
    if ok:
        real = [a._known if isinstance(a, _tensor.Tensor) else a for a in flat]
        if lifted is not None:
            real = [a.clone() if a is lifted else a for a in real]
        try:
            with _mesh.suspended():
                args, kwargs = tree_unflatten(real, tree)
                values = tree_flatten(fake_fn(*args, **kwargs))[0]
        except Exception:  # noqa: BLE001 - the workers will say what is wrong; just forget
            ok = False
    if not ok:
        for o in outs:
            o._known = None  # a fresh output has none; an in-place one no longer has
        for w in written or ():
            if isinstance(w, _tensor.Tensor):
                w._known = None
        return
    for o, v in zip(flat_out, values):
        if isinstance(o, _tensor.Tensor):
            o._known = v if isinstance(v, torch.Tensor) else None
