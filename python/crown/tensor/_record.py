"""The controller side: recording torch ops on mesh tensors as commands.

A Tensor is a wrapper subclass holding no data: its ref names its shard on
every worker of its mesh, and its FakeTensor (torch._subclasses) carries the
shape, dtype and strides, so that every op is first run on fakes, at record
time, and a shape error raises here before anything is sent. Inside
`with mesh.activate():` a TorchDispatchMode also captures factory functions
(torch.rand, torch.zeros, ...), which have no tensor argument.

Autograd runs on the controller above the dispatcher, over the wrappers:
backward() and optimizer steps reach __torch_dispatch__ as ordinary ops.
An op whose output is one of its inputs (add_, out=) keeps that input's ref:
the Call lists the ref among its results (so a failure poisons it) but no
new ref is made. Views make new refs; on the workers they are real views.

Threads: recording is the user's thread's business; only __del__ may run at
other points (garbage collection), and it only appends to a list.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException, FakeTensor)
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import _sent
from . import _execute, _fetch, _known, _mesh, _op_cache
from ._commands import Call, ReturnBorrow
from ._execute import Input
from ._mesh import Mesh, _location, fake_mode, suspended
from .errors import (BorrowedTensorError, DroppedTensorError, LocalTensorError, LocalValueError,
                     MeshMismatchError, NoMeshError, RecordError, ShapeError, StreamError)


# --- the tensor ----------------------------------------------------------------------


class Tensor(torch.Tensor):
    """A tensor on a mesh: one shard per worker, none on the controller.

    _ref: its ref on every worker (None once dropped); _mesh: its Mesh;
    _fake: a FakeTensor with its shape, dtype and strides; _location: the
    controller's file:line that made it."""

    _known = None  # its value, when the controller knows it (_track_known)
    # Set on a tensor only when they differ (one attribute less per op):
    _stream = _mesh.MAIN_STREAM  # the stream it belongs to
    _lent = 0  # borrows out of it (or, on a shared borrow's result, 1: no writes)
    _lent_mutably = False

    # crown.tensor._fast_record replaces it with its C++ path where it can.
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _op_cache.torch_function(func, types, args, kwargs)

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
        return _op_cache.dispatch(func, args, kwargs or {})

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
            return _fetch.reduce(self, dims, reduction, scatter, inplace=False)

    def reduce_(self, dims: Union[str, Sequence[str]] = (), reduction: str = "sum",
                scatter: bool = False) -> "Tensor":
        """reduce() in place: the result keeps this tensor's ref and storage."""
        with suspended():
            return _fetch.reduce(self, dims, reduction, scatter, inplace=True)


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


def _describe(fakes: List[torch.Tensor]) -> str:
    return ", ".join(f"{list(f.shape)} {str(f.dtype).replace('torch.', '')}" for f in fakes) or "no tensors"


def record(spec: str, fake_fn: Callable, args, kwargs, *, written=None, lift: bool = False,
           local_runs: bool = False, mesh: Optional[Mesh] = None,
           location: Optional[str] = None, cache=None):
    """Records one Call: checks the inputs, runs fake_fn on their fakes for the
    outputs' metadata, makes refs and wrappers for the new outputs."""
    flat, tree = tree_flatten((args, kwargs))
    inputs: List[int] = []
    wrappers: List[Tensor] = []
    slot: Dict[int, int] = {}  # ref -> input index
    fakes = list(flat)
    wire = list(flat)
    local = None
    for i, a in enumerate(flat):
        if isinstance(a, torch.Tensor):
            if isinstance(a, Tensor):
                ref = a._ref
                if ref is None:
                    where = getattr(a, "_drop_location", "?")
                    raise DroppedTensorError(
                        f"{spec}: a tensor (shape {list(a.shape)}, made at {a._location}) was "
                        f"used after drop() at {where}; keep it alive, or recompute it")
                m = a._mesh
                if mesh is None:
                    mesh = m
                elif m is not mesh:
                    raise MeshMismatchError(
                        f"{spec}: tensors of two meshes ({mesh} and {m}) met in one op; "
                        "move one with to_mesh(), or compute on each mesh separately")
                k = slot.get(ref)
                if k is None:
                    k = slot[ref] = len(inputs)
                    inputs.append(ref)
                    wrappers.append(a)
                fakes[i] = a._fake
                wire[i] = Input(k)
            else:
                local = i
    if local is not None:
        a = flat[local]
        if not inputs and local_runs and not lift:
            # Only local tensors (print(inspect(t)) inside activate()): run it here.
            return fake_fn(*args, **kwargs)
        if inputs or not lift:
            what = "mixed with mesh tensors" if inputs else "passed to a remote function"
            raise LocalTensorError(
                f"{spec}: a local torch tensor ({list(a.shape)} {a.dtype}, on the controller) "
                f"was {what}. Make it inside `with mesh.activate():` (torch.tensor(data) "
                "there sends the data to every rank), or fetch the mesh tensors with "
                "crown.inspect() and compute locally")
        fakes[local] = fake_mode().from_tensor(a)  # a constant: pickled into the blob
        fake_fn = _lifted
    active = _mesh._active[-1] if _mesh._active else None
    if mesh is None:
        mesh = active
        if mesh is None:
            raise NoMeshError(f"{spec}: no mesh to record on; call it inside `with mesh.activate():`")
    elif active is not None and active is not mesh:
        raise MeshMismatchError(
            f"{spec}: its tensors live on {mesh} but {active} is active; "
            "move them with to_mesh(), or activate their mesh")
    if len(mesh._dead) >= mesh._delete_batch:
        mesh._send_deletes()

    fargs, fkwargs = tree_unflatten(fakes, tree)
    try:
        with fake_mode():
            out = fake_fn(*fargs, **fkwargs)
    except (DataDependentOutputException, DynamicOutputShapeException) as e:
        raise LocalValueError(
            f"{spec}: needs the tensor's values on the controller (item(), bool(), if t: ..., "
            "or an output shape that depends on the values). Fetch it with crown.inspect(t), "
            "or keep the computation on the mesh") from e
    except RecordError:
        raise
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        raise ShapeError(
            f"{spec} cannot run on inputs of shapes/dtypes ({_describe([w._fake for w in wrappers])}): "
            f"{e}") from e

    if location is None:
        location = _location()
    flat_out, out_tree = tree_flatten(out)
    results: List[int] = []
    picks: List[int] = []
    descs: List[Any] = []
    # An aten op that returns its input's fake wrote into that input (add_,
    # out=). A remote function's propagate that returns an input only says
    # the output is shaped like it: a new tensor.
    aten = "::" in spec
    own = {id(w._fake): k for k, w in enumerate(wrappers)} if wrappers else None
    backend = mesh.backend
    for j, o in enumerate(flat_out):
        if isinstance(o, torch.Tensor):
            k = own.get(id(o)) if own else None
            if k is not None and not aten:
                with fake_mode():
                    o = torch.empty_strided(o.size(), o.stride(), dtype=o.dtype, device=o.device)
                k = None
            if k is not None:
                w = wrappers[k]
                if w.shape != o.shape or w.stride() != o.stride():
                    raise RecordError(
                        f"{spec}: an in-place op that changes its tensor's shape or strides is not "
                        "supported on mesh tensors; use its out-of-place form")
                flat_out[j] = w  # in place (add_) or out=: the input itself, same ref
                descs.append(k)
            else:
                if not isinstance(o, FakeTensor) or o.device.type == "meta":
                    o = _as_fake(o, wrappers)
                ref = backend.new_ref()
                results.append(ref)
                picks.append(j)
                w = flat_out[j] = Tensor(o, mesh, ref, location)
                descs.append(w._meta)
        else:
            descs.append((None, o))
    written_inputs: List[int] = []
    if written:
        for w in written:
            if isinstance(w, Tensor) and w._ref not in results:
                results.append(w._ref)
                picks.append(-slot[w._ref] - 1)
                written_inputs.append(slot[w._ref])
    for w in wrappers:
        check_use(w, spec, writes=False)
    for j in range(len(flat_out)):
        if isinstance(flat_out[j], Tensor) and flat_out[j]._ref in inputs:
            check_use(flat_out[j], spec, writes=True)  # an in-place op's input
    if written:
        for w in written:
            if isinstance(w, Tensor):
                check_use(w, spec, writes=True)
    _known._track_known(fake_fn, flat, tree, wrappers, flat_out, written,
                 lifted=flat[local] if lift and local is not None and not inputs else None)
    wargs, wkwargs = tree_unflatten(wire, tree)
    blob = _execute.encode(spec, wargs, wkwargs, picks)
    mesh._record(Call(results, blob, inputs, location))
    entry = None
    if cache is not None:
        table, key = cache
        if len(table) >= _op_cache._CACHE_LIMIT:
            table.clear()
        leaf = not isinstance(out, (list, tuple, dict))
        entry = table[key] = _op_cache._Entry(blob, tuple(descs), None if leaf else out_tree,
                                              tuple(written_inputs))
    captured = _op_cache._captured  # set while the fast path learns what an op records
    if captured is not None:
        captured.append((entry, inputs, results) if entry is not None else None)
    return tree_unflatten(flat_out, out_tree)


def _lifted(t):
    return t  # the fake of torch.tensor(data)'s constant is its output's


def _as_fake(t: torch.Tensor, wrappers: List[Tensor]) -> FakeTensor:
    # A propagator's meta or real tensor: only its metadata matters.
    device = wrappers[0].device if wrappers else torch.device("cpu")
    if t.device.type != "meta":
        device = t.device
    with fake_mode():
        return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device=device)
