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

import math
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode,
    _pop_mode_temporarily,
)
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import _sent
from . import _execute
from ._commands import REDUCTIONS, Call, Delete, Reduce
from ._execute import Input
from ._commands import ReturnBorrow, SwitchStream
from .errors import (
    BorrowedTensorError,
    CollectiveGradError,
    DroppedTensorError,
    LocalTensorError,
    LocalValueError,
    MeshMismatchError,
    NoMeshError,
    RecordError,
    ReduceArgumentError,
    ShapeError,
    StreamError,
)

_fake_mode: Optional[FakeTensorMode] = None


def fake_mode() -> FakeTensorMode:
    """The one FakeTensorMode of every mesh's fakes (fakes of two modes never meet)."""
    global _fake_mode
    if _fake_mode is None:
        _fake_mode = FakeTensorMode()
    return _fake_mode


class suspended:
    """`with suspended():` turns the activate() mode off for a while: for code
    that runs real or fake torch on the controller from outside the mode's own
    __torch_dispatch__ (which runs with the mode off already): a reduce or a
    remote call recording from user code, LocalBackend executing."""

    __slots__ = ("popped",)

    def __enter__(self):
        self.popped = None
        if _mode is not None and _get_current_dispatch_mode() is _mode:
            self.popped = _pop_mode_temporarily()
            self.popped.__enter__()

    def __exit__(self, *exc):
        if self.popped is not None:
            self.popped.__exit__(None, None, None)


# --- where the user recorded an op --------------------------------------------

_INTERNAL = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)
_internal_code: Dict[Any, bool] = {}


def _location() -> str:
    """file:line of the innermost frame outside torch and this package."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        internal = _internal_code.get(code)
        if internal is None:
            internal = _internal_code[code] = code.co_filename.startswith(_INTERNAL)
        if not internal:
            return f"{code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


# --- the mesh ----------------------------------------------------------------------

class StreamBase:
    """What the recording layer knows of a stream: its id on every engine
    (0: the main stream) and its name. crown.tensor.Stream is the user's."""

    __slots__ = ("id", "name")

    def __init__(self, id: int, name: str):
        self.id = id
        self.name = name

    def __repr__(self) -> str:
        return f"crown.Stream({self.name!r})"


MAIN_STREAM = StreamBase(0, "main")
_stream_now: StreamBase = MAIN_STREAM  # Stream.activate() sets it

_active: List["Mesh"] = []  # the activate() stack
_no_mesh_depth = 0
_mode: Optional["_MeshMode"] = None  # pushed once, by the outermost activate()


class Mesh:
    """A mesh of workers that run recorded tensor ops, over a Backend.

    `with mesh.activate():` records torch code on it. A ProcMesh offers its
    own activate() through one of these (it keeps one per mesh)."""

    def __init__(self, backend, *, delete_batch: int = 64):
        self.backend = backend
        self._shape: Dict[str, int] = dict(backend.shape)
        self._dead: List[int] = []  # refs whose tensors died; sent as one Delete
        self._returns: List[int] = []  # borrows whose tensors died: returned with the deletes
        self._delete_batch = delete_batch
        self._stream_id = 0  # the stream the engines run the next command on

    @property
    def shape(self) -> Dict[str, int]:
        return dict(self._shape)

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self._shape)

    def __repr__(self) -> str:
        return f"crown.tensor.Mesh({self._shape})"

    def activate(self) -> "_Activation":
        """Inside the with block, torch factory functions make tensors on this
        mesh and every op on its tensors is recorded; leaving it flushes."""
        return _Activation(self)

    def rank(self, dims: Union[str, Sequence[str]]) -> "Tensor":
        """A 0-dim int64 tensor holding each worker's index along dims (several
        dims: raveled row-major in the order given)."""
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        for d in dims:
            if d not in self._shape:
                raise ReduceArgumentError(f"rank({d!r}): the mesh has dims {list(self._shape)}")
        sizes = tuple(self._shape[d] for d in dims)
        with suspended():
            return record("crown.tensor._execute.mesh_rank", _fake_rank, (dims, sizes), {},
                          mesh=self, location=_location())

    def ravel(self, coords: Dict[str, int]) -> int:
        """The rank at coords; a missing label counts as 0."""
        for k in coords:
            if k not in self._shape:
                raise ValueError(f"unknown mesh dim {k!r}: the mesh has dims {list(self._shape)}")
        rank = 0
        for label, size in self._shape.items():
            c = coords.get(label, 0)
            if not 0 <= c < size:
                raise ValueError(f"coordinate {label}={c} is outside 0..{size - 1}")
            rank = rank * size + c
        return rank

    def flush(self) -> None:
        """Sends every recorded command (and pending deletes) to the workers."""
        self._send_deletes()
        self.backend.flush()

    def _record(self, command) -> None:
        """Records a command on the current stream."""
        self._on_stream()
        self.backend.record(command)

    def _on_stream(self) -> None:
        """The engines' later commands run on the current stream."""
        if self._stream_id != _stream_now.id:
            self._stream_id = _stream_now.id
            self.backend.record(SwitchStream(self._stream_id))

    def _send_deletes(self) -> None:
        _sent.prune()  # tensors sent to actors that have read them die now
        if self._returns:
            returns, self._returns = self._returns, []
            for borrow in returns:
                self.backend.record(ReturnBorrow(borrow))
        if self._dead:
            refs, self._dead = self._dead, []
            self.backend.record(Delete(refs))  # any stream: the engines order it after every use

    def _release(self, ref: int) -> None:
        # From __del__: only append (no backend call at an arbitrary point).
        self._dead.append(ref)


def _fake_rank(dims, sizes):
    return torch.empty((), dtype=torch.long)


class _Activation:
    def __init__(self, mesh: Mesh):
        self.mesh = mesh

    def __enter__(self) -> Mesh:
        global _mode
        _active.append(self.mesh)
        if _mode is None:
            mode = _MeshMode()
            mode.__enter__()
            _mode = mode
        return self.mesh

    def __exit__(self, *exc) -> None:
        global _mode
        _active.pop()
        if not _active and _mode is not None:
            mode, _mode = _mode, None
            mode.__exit__(None, None, None)
        self.mesh.flush()


class _NoMesh:
    """`with no_mesh:` (or `with no_mesh.activate():`): torch code runs locally
    on the controller, unrecorded, even inside a mesh's activate(); mesh
    tensors cannot be used there."""

    def activate(self) -> "_NoMesh":
        return self

    def __enter__(self) -> None:
        global _no_mesh_depth
        _no_mesh_depth += 1

    def __exit__(self, *exc) -> None:
        global _no_mesh_depth
        _no_mesh_depth -= 1

    def __repr__(self) -> str:
        return "crown.no_mesh"


no_mesh = _NoMesh()


class _MeshMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return dispatch(func, args, kwargs or {})


# --- the tensor ----------------------------------------------------------------------


class Tensor(torch.Tensor):
    """A tensor on a mesh: one shard per worker, none on the controller.

    _ref: its ref on every worker (None once dropped); _mesh: its Mesh;
    _fake: a FakeTensor with its shape, dtype and strides; _location: the
    controller's file:line that made it."""

    _known = None  # its value, when the controller knows it (_track_known)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return torch_function(func, types, args, kwargs)

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
        r._stream = _stream_now
        r._lent = 0  # borrows out of it (or, on a shared borrow's result, 1: no writes)
        r._lent_mutably = False
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
        return dispatch(func, args, kwargs or {})

    def __del__(self):
        ref = self.__dict__.get("_ref")
        if ref is not None:
            borrow = self.__dict__.get("_borrow")
            if borrow is not None:
                self._mesh._returns.append(borrow[0])
                _returned(borrow[1])
            self._mesh._release(ref)

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
            return _reduce(self, dims, reduction, scatter, inplace=False)

    def reduce_(self, dims: Union[str, Sequence[str]] = (), reduction: str = "sum",
                scatter: bool = False) -> "Tensor":
        """reduce() in place: the result keeps this tensor's ref and storage."""
        with suspended():
            return _reduce(self, dims, reduction, scatter, inplace=True)


def _returned(lender: "Tensor") -> None:
    lender._lent -= 1
    lender._lent_mutably = False


def check_use(t: "Tensor", spec: str, writes: bool) -> None:
    """The stream rules: a tensor is used on its own stream (another borrows
    it first); a lender does not use a tensor it lent mutably, nor write one
    it lent at all; a shared borrow is not written."""
    if t._stream is not _stream_now:
        raise StreamError(
            f"{spec}: the tensor (made at {t._location}) belongs to stream {t._stream.name!r}, "
            f"and stream {_stream_now.name!r} is active: borrow it there first "
            f"(Stream({_stream_now.name!r}).borrow(t))")
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


# --- recording ---------------------------------------------------------------------

_PASS, _OP, _LIFT, _VALUE = 0, 1, 2, 3
# Ops whose answer is a value on the controller (item(), bool(t), torch.equal):
# FakeTensorMode would make one up.
_VALUE_OPS = ("aten::_local_scalar_dense", "aten::equal", "aten::is_nonzero", "aten::allclose")


class _OpInfo:
    __slots__ = ("spec", "kind", "written", "cache")

    def __init__(self, func):
        schema = func._schema
        self.spec = f"{schema.name}.{func._overloadname}"
        if schema.name.startswith("profiler::"):
            self.kind = _PASS  # record_function's handles: controller-side bookkeeping
        elif schema.name in _VALUE_OPS:
            self.kind = _VALUE
        elif schema.name in ("aten::lift_fresh", "aten::lift"):
            self.kind = _LIFT  # torch.tensor(data) inside activate(): data goes to every rank
        else:
            self.kind = _OP
        # The arguments the op writes (self of add_, out of add.out, foreach_ lists).
        self.written = tuple(
            (i, a.name) for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write)
        # key of the arguments' metadata and constants -> _Entry
        self.cache: Dict[tuple, "_Entry"] = {}


class _Entry:
    """What an op does with arguments of one key: the same blob, and outputs
    of the same metadata. descs: per flattened output, a meta tuple (a fresh
    tensor), an int k (input k itself: in place, out=) or (None, value)."""

    __slots__ = ("blob", "descs", "tree", "written")

    def __init__(self, blob, descs, tree, written):
        self.blob = blob
        self.descs = descs
        self.tree = tree
        self.written = written  # input indices the op writes, beyond its outputs


_MISS = object()


class _Slow(Exception):
    """The fast path does not apply; record() sorts it out (and raises what is wrong)."""


_CACHE_LIMIT = 4096


def _key(v, inputs: List[int], wrappers: List["Tensor"], slot: Dict[int, int]):
    t = type(v)
    if t is Tensor:
        ref = v._ref
        if ref is None or v._stream is not _stream_now or v._lent_mutably or v._known is not None:
            raise _Slow
        k = slot.get(ref)
        if k is None:
            k = slot[ref] = len(inputs)
            inputs.append(ref)
            wrappers.append(v)
        return (k, v._meta)
    if t is list or t is tuple:
        return (t, tuple([_key(x, inputs, wrappers, slot) for x in v]))
    if isinstance(v, (torch.Tensor, dict)):
        raise _Slow  # a local tensor
    return (t, v)


def _arguments_key(args, kwargs):
    """(key, input refs, their wrappers) of an op's arguments: their metadata
    and constants, mesh tensors by first appearance. Raises _Slow."""
    inputs: List[int] = []
    wrappers: List[Tensor] = []
    slot: Dict[int, int] = {}
    key = tuple([_key(a, inputs, wrappers, slot) for a in args])
    if kwargs:
        key = (key, tuple([(n, _key(v, inputs, wrappers, slot)) for n, v in kwargs.items()]))
    return key, inputs, wrappers


def _outputs(mesh: Mesh, descs, wrappers: List["Tensor"], location: str):
    """(outputs, their new refs) of a cached op, by its descs: an input itself
    (int k), a constant ((None, value)) or a fresh tensor (its meta). Sends
    the pending deletes first when enough have gathered."""
    if len(mesh._dead) >= mesh._delete_batch:
        mesh._send_deletes()
    backend = mesh.backend
    results: List[int] = []
    outs = []
    for d in descs:
        if type(d) is int:
            outs.append(wrappers[d])
        elif d[0] is None:
            outs.append(d[1])
        else:
            ref = backend.new_ref()
            results.append(ref)
            outs.append(Tensor(None, mesh, ref, location, d))
    return outs, results


def _fast(info: _OpInfo, args, kwargs):
    """An op seen before with arguments of the same metadata and constants:
    no fakes, no pickling. (_MISS, key) when not cached yet, (_MISS, None)
    when the fast path does not apply."""
    try:
        key, inputs, wrappers = _arguments_key(args, kwargs)
    except _Slow:
        return _MISS, None
    active = _active[-1] if _active else None
    if wrappers:
        mesh = wrappers[0]._mesh
        for w in wrappers:
            if w._mesh is not mesh:
                return _MISS, None
        if active is not None and active is not mesh:
            return _MISS, None
    else:
        mesh = active
        if mesh is None:
            return _MISS, None
    entry = info.cache.get(key)
    if entry is None:
        return _MISS, key
    for k in entry.written:
        if wrappers[k]._lent:
            return _MISS, None  # record() raises the borrow's error
    for d in entry.descs:
        if type(d) is int and wrappers[d]._lent:
            return _MISS, None
    location = _location()
    outs, results = _outputs(mesh, entry.descs, wrappers, location)
    for k in entry.written:
        results.append(inputs[k])
    mesh._record(Call(results, entry.blob, inputs, location))
    if _captured is not None:
        _captured.append((entry, inputs, results))
    if entry.tree is None:
        return outs[0], None
    return tree_unflatten(outs, entry.tree), None


# --- the torch-function fast path ------------------------------------------------
#
# An out-of-place op on mesh tensors that need no autograd, seen before with
# arguments of the same metadata and constants, is recorded straight from
# __torch_function__: before torch's dispatcher, FakeTensor and the mode,
# which cost far more than the recording itself. What the op records is
# learnt the first time, by capturing what its way through the dispatcher
# recorded: one Call, whose inputs are the op's own tensor arguments.

_captured: Optional[List[Any]] = None  # what dispatch records while a miss is learnt
_disabled = torch._C._disabled_torch_function_impl
_no_torch_function = torch._C.DisableTorchFunction
_tf_cache: Dict[Any, Dict[tuple, Any]] = {}  # func -> key -> (_Entry, perm) or None (slow)


class _TfEntry:
    __slots__ = ("blob", "descs", "perm")

    def __init__(self, blob, descs, perm):
        self.blob = blob
        self.descs = descs  # per output: a meta tuple (a fresh tensor) or (None, value)
        self.perm = perm  # the Call's input k is the op's tensor argument perm[k]


def torch_function(func, types, args, kwargs):
    if kwargs is None:
        kwargs = {}
    if _no_mesh_depth or not _active:
        return _disabled(func, types, args, kwargs)
    try:
        key, inputs, wrappers = _arguments_key(args, kwargs)
    except _Slow:
        return _disabled(func, types, args, kwargs)
    if not wrappers:
        return _disabled(func, types, args, kwargs)
    mesh = _active[-1]
    for w in wrappers:
        if w._mesh is not mesh:
            return _disabled(func, types, args, kwargs)  # record() raises what is wrong
    if torch.is_grad_enabled():
        with _no_torch_function():
            for w in wrappers:
                if w.requires_grad:
                    return _disabled(func, types, args, kwargs)  # autograd records it
    table = _tf_cache.get(func)
    if table is None:
        table = _tf_cache[func] = {}
    try:
        entry = table.get(key, _MISS)
    except TypeError:  # a constant that is not hashable (a slice)
        return _disabled(func, types, args, kwargs)
    if entry is _MISS:
        return _learn(func, types, args, kwargs, table, key, inputs)
    if entry is None:
        return _disabled(func, types, args, kwargs)
    location = _location()
    outs, results = _outputs(mesh, entry.descs, wrappers, location)
    mesh._record(Call(results, entry.blob, [inputs[k] for k in entry.perm], location))
    return outs[0]


def _learn(func, types, args, kwargs, table, key, inputs):
    """The first call of func with arguments of this key: through the
    dispatcher, capturing what it records; cached when it is one Call of a
    fresh tensor from the op's own tensor arguments (else: always that way)."""
    global _captured
    outer, _captured = _captured, []
    try:
        out = _disabled(func, types, args, kwargs)
        captured = _captured
    finally:
        _captured = outer
    if outer is not None:
        outer.extend(captured)
    entry = None
    if len(captured) == 1 and captured[0] is not None and isinstance(out, Tensor):
        aten, call_inputs, results = captured[0]
        fresh = (aten.tree is None and not aten.written and len(results) == 1
                 and results[0] == out._ref and type(aten.descs[0]) is tuple
                 and aten.descs[0][0] is not None)
        position = {ref: k for k, ref in enumerate(inputs)}
        if fresh and all(ref in position for ref in call_inputs):
            entry = _TfEntry(aten.blob, aten.descs, tuple(position[ref] for ref in call_inputs))
    if len(table) >= _CACHE_LIMIT:
        table.clear()
    table[key] = entry
    return out


_infos: Dict[Any, _OpInfo] = {}


def dispatch(func, args, kwargs):
    """Every aten op that reaches a mesh tensor or the activate() mode."""
    info = _infos.get(func)
    if info is None:
        info = _infos[func] = _OpInfo(func)
    if info.kind == _PASS:
        return func(*args, **kwargs)
    if _no_mesh_depth:
        for a in tree_flatten((args, kwargs))[0]:
            if isinstance(a, Tensor):
                raise NoMeshError(
                    f"{info.spec}: a mesh tensor ({a!r}) was used inside no_mesh, where "
                    "torch code runs locally; fetch it first with crown.inspect(t)")
        return func(*args, **kwargs)
    if info.kind == _VALUE and any(isinstance(a, Tensor) for a in tree_flatten((args, kwargs))[0]):
        known = _known_values(args, kwargs)
        if known is not None:
            return func(*known[0], **known[1])  # the same on every rank: no fetch
        raise LocalValueError(
            f"{info.spec}: needs a mesh tensor's values on the controller (item(), bool(t), "
            "if t: ..., torch.equal). Fetch it with crown.inspect(t) and use the local tensor, "
            "or keep the computation on the mesh (torch.where, ...)")
    key = None
    if info.kind == _OP:
        out, key = _fast(info, args, kwargs)
        if out is not _MISS:
            return out
    written = None
    if info.written:
        written = []
        for i, name in info.written:
            v = kwargs[name] if name in kwargs else args[i] if i < len(args) else None
            if isinstance(v, (list, tuple)):
                written.extend(v)
            elif v is not None:
                written.append(v)
    return record(info.spec, func, args, kwargs, written=written, lift=info.kind == _LIFT,
                  local_runs=True, cache=(info.cache, key) if key is not None else None)


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
    active = _active[-1] if _active else None
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
    _track_known(fake_fn, flat, tree, wrappers, flat_out, written,
                 lifted=flat[local] if lift and local is not None and not inputs else None)
    wargs, wkwargs = tree_unflatten(wire, tree)
    blob = _execute.encode(spec, wargs, wkwargs, picks)
    mesh._record(Call(results, blob, inputs, location))
    entry = None
    if cache is not None:
        table, key = cache
        if len(table) >= _CACHE_LIMIT:
            table.clear()
        leaf = not isinstance(out, (list, tuple, dict))
        entry = table[key] = _Entry(blob, tuple(descs), None if leaf else out_tree,
                                    tuple(written_inputs))
    if _captured is not None:
        _captured.append((entry, inputs, results) if entry is not None else None)
    return tree_unflatten(flat_out, out_tree)


def _lifted(t):
    return t  # the fake of torch.tensor(data)'s constant is its output's


# --- values the controller knows --------------------------------------------------

_KNOWN_LIMIT = 64  # elements: small bookkeeping tensors (Adam's step count), not data


def _known_values(args, kwargs):
    """(args, kwargs) with every mesh tensor replaced by its known value, or
    None when one of them has none."""
    flat, tree = tree_flatten((args, kwargs))
    for i, a in enumerate(flat):
        if isinstance(a, Tensor):
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
    outs = [o for o in flat_out if isinstance(o, Tensor)]
    if lifted is None and not any(w._known is not None for w in wrappers):
        return  # the common case: nothing known, nothing to forget
    aten = lifted is not None or isinstance(fake_fn, torch._ops.OpOverload)  # not propagate=
    ok = aten and (lifted is not None or all(w._known is not None for w in wrappers))
    ok = ok and torch.Tag.nondeterministic_seeded not in getattr(fake_fn, "tags", ())
    ok = ok and all(math.prod(o._meta[0]) <= _KNOWN_LIMIT for o in outs)
    if ok:
        real = [a._known if isinstance(a, Tensor) else a for a in flat]
        if lifted is not None:
            real = [a.clone() if a is lifted else a for a in real]
        try:
            with suspended():
                args, kwargs = tree_unflatten(real, tree)
                values = tree_flatten(fake_fn(*args, **kwargs))[0]
        except Exception:  # noqa: BLE001 - the workers will say what is wrong; just forget
            ok = False
    if not ok:
        for o in outs:
            o._known = None  # a fresh output has none; an in-place one no longer has
        for w in written or ():
            if isinstance(w, Tensor):
                w._known = None
        return
    for o, v in zip(flat_out, values):
        if isinstance(o, Tensor):
            o._known = v if isinstance(v, torch.Tensor) else None


def _as_fake(t: torch.Tensor, wrappers: List[Tensor]) -> FakeTensor:
    # A propagator's meta or real tensor: only its metadata matters.
    device = wrappers[0].device if wrappers else torch.device("cpu")
    if t.device.type != "meta":
        device = t.device
    with fake_mode():
        return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device=device)


def _reduce(t: Tensor, dims, reduction: str, scatter: bool, inplace: bool) -> Tensor:
    name = "reduce_" if inplace else "reduce"
    if t._ref is None:
        raise DroppedTensorError(f"{name}: the tensor (made at {t._location}) was dropped at "
                                 f"{getattr(t, '_drop_location', '?')}")
    if _no_mesh_depth:
        raise NoMeshError(f"{name}: a mesh tensor cannot be reduced inside no_mesh")
    mesh = t._mesh
    active = _active[-1] if _active else None
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
    check_use(t, name, writes=inplace)
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
        with fake_mode():
            f = torch.empty(out_shape, dtype=fake.dtype, device=fake.device)
        ref = mesh.backend.new_ref()
        out = Tensor(f, mesh, ref, _location())
    mesh._record(Reduce(ref, t._ref, dims, reduction, bool(scatter),
                        out._location if not inplace else _location(), t._meta))
    return out


# --- fetching --------------------------------------------------------------------


def fetch_shard(t: Tensor, **coords: int):
    """A Future of t's shard at the mesh coordinates (a missing label counts
    as 0); .get() gives a torch.Tensor or raises RemoteException."""
    if not isinstance(t, Tensor):
        raise TypeError(f"fetch_shard: expected a mesh tensor, got {type(t).__name__}")
    if t._ref is None:
        raise DroppedTensorError(f"fetch_shard: the tensor (made at {t._location}) was dropped")
    mesh = t._mesh
    rank = mesh.ravel(coords)
    mesh.flush()
    return mesh.backend.fetch(t._ref, rank)


def inspect(t: Tensor, **coords: int) -> torch.Tensor:
    """t's shard at the mesh coordinates, on the controller (waits)."""
    return fetch_shard(t, **coords).get()
