"""The mesh tensor: Tensor, a wrapper subclass holding no data, and the
stream rules its every use keeps (check_use).

A Tensor's ref names its shard on every worker of its mesh, and its
FakeTensor (torch._subclasses) carries the shape, dtype and strides, which
record() (_record) runs each op on first. A cached op's output has only its
metadata; its fake is made when first needed.

Threads: recording is the user's thread's business; only __del__ may run at
other points (garbage collection), and it only appends to a list.

In the recording layer it sits on _mesh; torch's calls into a Tensor
(__torch_function__, __torch_dispatch__) and reduce() go up to _op_cache
and _fetch through _hooks (see there for the layer's order).
"""

from typing import Optional, Sequence, Union

import torch
from torch.utils._pytree import tree_map

from .. import _sent
from . import _hooks, _mesh
from ._commands import ReturnBorrow
from ._mesh import Mesh, _location, fake_mode, suspended
from .errors import BorrowedTensorError, DroppedTensorError, LocalValueError, StreamError


class Tensor(torch.Tensor):
    """A tensor on a mesh: one shard per worker, none on the controller.

    _ref: its ref on every worker (None once dropped); _mesh: its Mesh;
    _fake: a FakeTensor with its shape, dtype and strides; _location: the
    controller's file:line that made it."""

    _known = None  # its value, when the controller knows it (_known._track_known)
    # Set on a tensor only when they differ (one attribute less per op):
    _stream = _mesh.MAIN_STREAM  # the stream it belongs to
    _lent = 0  # borrows out of it (or, on a shared borrow's result, 1: no writes)
    _lent_mutably = False

    # _op_cache's; crown.tensor._fast_record replaces it with its C++ path where it can.
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _hooks.torch_function(func, types, args, kwargs)

    @staticmethod
    def __new__(cls, fake: Optional[torch.Tensor], mesh: Mesh, ref: int, location: str,
                meta: Optional[tuple] = None):
        # meta: (size, stride, storage_offset, dtype, device); without a fake
        # (a cached op's output), the fake is made from it when first needed.
        if meta is None:
            meta = _meta_of(fake)
        size, stride, offset, dtype, device = meta
        r = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=device,
            requires_grad=False)
        if fake is not None:
            r._fake = fake
        r._meta = meta
        r._mesh = mesh
        r._ref = ref
        r._location = location
        stream = _mesh._stream_now
        if stream is not _mesh.MAIN_STREAM:
            r._stream = stream
        return r

    def __getattr__(self, name):
        if name == "_fake":  # only when missing: a cached op's output
            fake = _fake_from_meta(self.__dict__["_meta"])
            self.__dict__["_fake"] = fake
            return fake
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __init__(self, *args, **kwargs):
        pass

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _hooks.dispatch(func, args, kwargs or {})

    def __del__(self):
        state = self.__dict__
        ref = state.get("_ref")
        if ref is not None:
            borrow = state.get("_borrow")
            if borrow is not None:
                self._mesh._returns.append(borrow[0])
                _returned(borrow[1])
            state["_mesh"]._dead.append(ref)  # Mesh._release, inlined: once per op

    def __repr__(self, *, tensor_contents=None) -> str:
        state = "dropped" if self._ref is None else f"ref={self._ref}"
        grad = f", grad_fn={type(self.grad_fn).__name__}" if self.grad_fn is not None else ""
        return (f"crown.Tensor({state}, shape={tuple(self.shape)}, dtype={self.dtype}, "
                f"mesh={self._mesh}{grad})")

    def __format__(self, spec: str) -> str:
        return repr(self)  # torch's would fetch a 0-dim tensor's value

    def __reduce_ex__(self, protocol):
        # Passed to an actor's endpoint: that rank's shard arrives (read from
        # its engine, which the actors of a proc share).
        if self._ref is None:
            raise DroppedTensorError(f"a dropped tensor (made at {self._location}) was sent")
        token = getattr(self._mesh.backend, "shard_token", None)
        if token is None:
            raise TypeError("a mesh tensor travels to actors only on a mesh of crown's engines "
                            "(ProcMesh.activate())")
        self._mesh._send_deletes()
        self._known = None  # the actor may write its shard
        _sent.note(self)  # kept alive by the adverb sending it until the actors have read it
        return token(self._ref)

    def _needs_values(self, *args, **kwargs):
        raise LocalValueError(
            "a mesh tensor's values live on the workers: fetch them with crown.inspect(t) "
            "(or crown.fetch_shard(t, **coords).get())")

    numpy = tolist = __array__ = _needs_values

    @property
    def mesh(self) -> Mesh:
        return self._mesh

    @property
    def ref(self) -> Optional[int]:
        return self._ref

    @property
    def dropped(self) -> bool:
        return self._ref is None

    def drop(self) -> None:
        """Frees this tensor's shard on every worker now; later uses raise
        DroppedTensorError. (Views of it made earlier keep their own refs.)
        A borrowed tensor (Stream.borrow) goes back to its lender."""
        ref = self._ref
        if ref is not None:
            self._ref = None
            self._drop_location = _location()
            borrow = self.__dict__.get("_borrow")
            if borrow is not None:
                with suspended():
                    self._mesh._record(ReturnBorrow(borrow[0]))
                _returned(borrow[1])
            self._mesh._release(ref)

    def slice_mesh(self, **coords) -> "Tensor":
        """This tensor on a slice of its mesh (``slice_mesh(procs=0)``, or
        ``procs=slice(0, 2)``): the selected procs' shards themselves (a
        view: writes to either show in both), as a tensor of the sliced mesh
        (whose own activate() then records on it)."""
        return self._moved("slice_mesh", lambda backend: backend.slice(coords), view=True)

    def to_mesh(self, mesh) -> "Tensor":
        """This tensor on another mesh (a ProcMesh or a crown.tensor.Mesh).
        When that mesh has every dimension of this one, of the same sizes,
        its shard at each coordinate is this tensor's at the same
        coordinates (Monarch's rule; copied along dimensions only the target
        has); otherwise each of its procs must hold a shard, and keeps its
        own. A copy: over MPI between procs, in memory within one."""
        target = mesh.tensors() if hasattr(mesh, "tensors") else mesh
        return self._moved("to_mesh", lambda backend: target, view=False)

    def _moved(self, name: str, target_of, view: bool) -> "Tensor":
        if self._ref is None:
            raise DroppedTensorError(f"{name}: the tensor (made at {self._location}) was dropped")
        move = getattr(self._mesh.backend, "move", None)
        if move is None:
            raise NotImplementedError(f"{name} needs a mesh of crown's engines (ProcMesh.activate())")
        with suspended():
            check_use(self, name, writes=False)
            self._mesh.flush()
            target = target_of(self._mesh.backend)
            if target is self._mesh:
                return self
            return move(self, target, view, _location())

    def reduce(self, dims: Union[str, Sequence[str]] = (), reduction: str = "sum",
               scatter: bool = False) -> "Tensor":
        """A collective over the mesh dims (a label or labels; () = all).
        sum/avg/min/max/product: allreduce (scatter=True: reduce-scatter along
        dim 0); stack: allgather along a new leading dim of size prod(dims)
        (scatter=True: all-to-all along dim 0)."""
        with suspended():
            return _hooks.reduce(self, dims, reduction, scatter, inplace=False)

    def reduce_(self, dims: Union[str, Sequence[str]] = (), reduction: str = "sum",
                scatter: bool = False) -> "Tensor":
        """reduce() in place: the result keeps this tensor's ref and storage."""
        with suspended():
            return _hooks.reduce(self, dims, reduction, scatter, inplace=True)


def _returned(lender: "Tensor") -> None:
    lender._lent -= 1
    lender._lent_mutably = False


def check_use(t: "Tensor", spec: str, writes: bool) -> None:
    """The stream rules: a tensor is used on its own stream (another borrows
    it first); a lender does not use a tensor it lent mutably, nor write one
    it lent at all; a shared borrow is not written."""
    if t._stream is not _mesh._stream_now:
        raise StreamError(
            f"{spec}: the tensor (made at {t._location}) belongs to stream {t._stream.name!r}, "
            f"and stream {_mesh._stream_now.name!r} is active: borrow it there first "
            f"(Stream({_mesh._stream_now.name!r}).borrow(t))")
    if t._lent_mutably:
        raise BorrowedTensorError(
            f"{spec}: the tensor (made at {t._location}) is lent mutably to another stream: "
            "drop the borrow before its lender uses it again")
    if writes and t._lent:
        raise BorrowedTensorError(
            f"{spec}: the tensor (made at {t._location}) is borrowed for reading: nobody "
            "writes it until the borrow is dropped (borrow it with mutable=True to write it)")


def _meta_of(fake: torch.Tensor) -> tuple:
    return (tuple(fake.shape), tuple(fake.stride()), fake.storage_offset(), fake.dtype,
            fake.device)


def _fake_from_meta(meta: tuple) -> torch.Tensor:
    size, stride, offset, dtype, device = meta
    extent = offset + 1 + sum((n - 1) * st for n, st in zip(size, stride)) if all(size) else offset
    with suspended(), fake_mode():
        return torch.empty(extent, dtype=dtype, device=device).as_strided(size, stride, offset)


def slice_mesh(tensors, **coords):
    """Monarch's function: ``t.slice_mesh(**coords)`` for every mesh tensor
    of the pytree `tensors` (other leaves are kept as they are)."""
    return tree_map(lambda t: t.slice_mesh(**coords) if isinstance(t, Tensor) else t, tensors)


def to_mesh(tensors, mesh):
    """Monarch's function: ``t.to_mesh(mesh)`` for every mesh tensor of the
    pytree `tensors` (other leaves are kept as they are)."""
    return tree_map(lambda t: t.to_mesh(mesh) if isinstance(t, Tensor) else t, tensors)
