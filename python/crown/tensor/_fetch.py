"""Collectives and fetches recorded on mesh tensors: Tensor.reduce(_) and
crown.fetch_shard / crown.inspect (Monarch's signatures: a pytree, a shard
dict and keyword coordinates).

In the recording layer it sits on _mesh and _tensor; Tensor.reduce(_)
calls reduce() through _hooks (see there for the layer's order)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _hooks, _mesh, _tensor
from ._commands import REDUCTIONS, Reduce
from .errors import (CollectiveGradError, DroppedTensorError, MeshMismatchError,
                     ReduceArgumentError)


def reduce(t: _tensor.Tensor, dims, reduction: str, scatter: bool,
           inplace: bool) -> _tensor.Tensor:
    name = "reduce_" if inplace else "reduce"
    if t._ref is None:
        raise DroppedTensorError(f"{name}: the tensor (made at {t._location}) was dropped at "
                                 f"{getattr(t, '_drop_location', '?')}")
    mesh = t._mesh
    active = _mesh._active[-1] if _mesh._active else None
    if active is not None and active is not mesh:
        raise MeshMismatchError(f"{name}: the tensor lives on {mesh} but {active} is active")
    shape = mesh._shape
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    if not dims:
        dims = tuple(shape)
    for d in dims:
        if d not in shape:
            raise ReduceArgumentError(f"{name}: unknown mesh dim {d!r}; the mesh has dims {list(shape)}")
    if len(set(dims)) != len(dims):
        raise ReduceArgumentError(f"{name}: a dim is reduced twice in {dims}")
    if reduction not in REDUCTIONS:
        raise ReduceArgumentError(f"{name}: reduction {reduction!r} is not one of {REDUCTIONS}")
    _tensor.check_use(t, name, writes=inplace)
    if inplace:
        t._known = None
    if t.requires_grad and torch.is_grad_enabled():
        raise CollectiveGradError(
            f"{name}: the tensor requires grad, and autograd cannot differentiate through a "
            "collective. Reduce a detached tensor (t.detach()), the gradients after backward() "
            "(p.grad.reduce_(...)), or do it under torch.no_grad()")
    n = 1
    for d in dims:
        n *= shape[d]
    fake = t._fake
    out_shape = list(fake.shape)
    if scatter:
        if not out_shape or out_shape[0] % n:
            raise ReduceArgumentError(
                f"{name}: scatter splits dim 0 into {n} equal chunks, but the shape is {out_shape}")
        if reduction != "stack":
            out_shape[0] //= n
    elif reduction == "stack":
        out_shape.insert(0, n)
    if inplace:
        if out_shape != list(fake.shape):
            raise ReduceArgumentError(
                f"{name}: {reduction}{' with scatter' if scatter else ''} changes the shape "
                f"{list(fake.shape)} -> {out_shape}; use reduce() (out of place)")
        out, ref = t, t._ref
    else:
        with _mesh.fake_mode():
            f = torch.empty(out_shape, dtype=fake.dtype, device=fake.device)
        ref = mesh.backend.new_ref()
        out = _tensor.Tensor(f, mesh, ref, _mesh._location())
    mesh._record(Reduce(ref, t._ref, dims, reduction, bool(scatter),
                        out._location if not inplace else _mesh._location(), t._meta))
    return out


# --- fetching --------------------------------------------------------------------


def fetch_shard(obj, shard: Optional[Dict[str, int]] = None, **coords: int):
    """A Future of the shard at the mesh coordinates (a missing label counts
    as 0) of each mesh tensor in obj, a mesh tensor or a pytree of them
    (other leaves come back as they are), as in Monarch: ``shard`` is a dict
    of coordinates, to which keyword coordinates add. .get() gives a
    torch.Tensor (or the pytree of them) or raises RemoteException. Each
    tensor is fetched from its own mesh, whatever mesh is active (no_mesh
    included)."""
    if shard:
        coords = {**shard, **coords}
    if isinstance(obj, _tensor.Tensor):
        return _fetch_one(obj, coords)
    leaves, tree = tree_flatten(obj)
    if not any(isinstance(v, _tensor.Tensor) for v in leaves):
        raise TypeError(f"fetch_shard: expected a mesh tensor or a pytree holding one, got "
                        f"{type(obj).__name__}")
    futures = {i: _fetch_one(v, coords) for i, v in enumerate(leaves)
               if isinstance(v, _tensor.Tensor)}
    return _TreeFuture(leaves, futures, tree)


def _fetch_one(t: _tensor.Tensor, coords: Dict[str, int]):
    if t._ref is None:
        raise DroppedTensorError(f"fetch_shard: the tensor (made at {t._location}) was dropped")
    mesh = t._mesh
    rank = mesh.ravel(coords)
    mesh.flush()
    return mesh.backend.fetch(t._ref, rank)


class _TreeFuture:
    """fetch_shard of a pytree: each of its tensors' futures, got in order."""

    def __init__(self, leaves: List[Any], futures: Dict[int, Any], tree):
        self._leaves = leaves
        self._futures = futures  # leaf index -> the Future of that tensor's shard
        self._tree = tree

    def get(self, timeout: Optional[float] = None):
        values = list(self._leaves)
        for i, future in self._futures.items():
            values[i] = future.get(timeout)
        return tree_unflatten(values, self._tree)

    result = get


def inspect(obj, shard: Optional[Dict[str, int]] = None, **coords: int):
    """fetch_shard(obj, shard, **coords).get(): on the controller (waits)."""
    return fetch_shard(obj, shard, **coords).get()


_hooks.reduce = reduce  # Tensor.reduce and reduce_ call it through _hooks
