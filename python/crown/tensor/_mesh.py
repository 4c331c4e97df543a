"""The recording layer's mesh and its state (_tensor and _record record on
it): the one FakeTensorMode, the activate() stack and the TorchDispatchMode
it pushes, no_mesh, the current stream, and where the user recorded an op.
The state is read through this module (`_mesh._active`), so that the
modules that record see what activate() and Stream.activate() set.

The bottom of the recording layer: it imports only _hooks of it, through
which the modes hand every op to _op_cache.dispatch and Mesh.rank() records
with _record.record (see _hooks for the layer's order)."""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch._C import _len_torch_dispatch_stack
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import (TorchDispatchMode, _get_current_dispatch_mode,
                                          _pop_mode_temporarily)

from .. import _sent
from . import _hooks
from ._commands import Delete, ReturnBorrow, SwitchStream
from .errors import ReduceArgumentError

if TYPE_CHECKING:
    from ._tensor import Tensor


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
        if _mode is None:
            return
        if type(_mode) is _DirectMode:
            if getattr(_direct, "on", False):
                _mode.off()
                self.popped = _mode
        elif _get_current_dispatch_mode() is _mode:
            self.popped = _pop_mode_temporarily()
            self.popped.__enter__()

    def __exit__(self, *exc):
        if self.popped is None:
            return
        if type(self.popped) is _DirectMode:
            self.popped.on()
        else:
            self.popped.__exit__(None, None, None)


# --- where the user recorded an op --------------------------------------------

_INTERNAL = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)
_internal_code: Dict[Any, bool] = {}
# (code, instruction) -> "file:line": a line number costs a walk of the
# code's line table (PyCode_Addr2Line), and a loop records from a few places.
_places: Dict[Tuple[Any, int], str] = {}
_PLACES_LIMIT = 4096


def _location() -> str:
    """file:line of the innermost frame outside torch and this package."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        internal = _internal_code.get(code)
        if internal is None:
            internal = _internal_code[code] = code.co_filename.startswith(_INTERNAL)
        if not internal:
            key = (code, f.f_lasti)
            place = _places.get(key)
            if place is None:
                if len(_places) >= _PLACES_LIMIT:
                    _places.clear()
                place = _places[key] = f"{code.co_filename}:{f.f_lineno}"
            return place
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

# The activate() stack, as Monarch's: a mesh per `with mesh.activate():`,
# None per `with no_mesh:`; the innermost is the ambient mesh, which an op
# records on only when none of its arguments is a mesh tensor.
_active: List[Optional["Mesh"]] = []
# 1 while no_mesh is the innermost (_active[-1] is None), else 0 (the name
# is older: tensor_fast_record.cpp reads it): the fast paths then leave the
# op to _op_cache.dispatch.
_no_mesh_depth = 0
_mode: Optional[Union["_MeshMode", "_DirectMode"]] = None  # set once, by the outermost activate()


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
            return _hooks.record("crown.tensor._execute.mesh_rank", _fake_rank, (dims, sizes), {},
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
        global _mode, _no_mesh_depth
        _active.append(self.mesh)
        _no_mesh_depth = 0
        if _mode is None:
            # Straight into torch when no other TorchDispatchMode is active;
            # beneath one, on its stack.
            if _len_torch_dispatch_stack() == 0:
                mode = _DirectMode()
                mode.on()
            else:
                mode = _MeshMode()
                mode.__enter__()
            _mode = mode
        return self.mesh

    def __exit__(self, *exc) -> None:
        global _mode
        _active.pop()
        _innermost_changed()
        if _mode is not None and not any(m is not None for m in _active):
            mode, _mode = _mode, None
            if type(mode) is _DirectMode:
                mode.off()
            else:
                mode.__exit__(None, None, None)
        self.mesh.flush()


def _innermost_changed() -> None:
    global _no_mesh_depth
    _no_mesh_depth = 1 if _active and _active[-1] is None else 0


class _NoMesh:
    """`with no_mesh:` (or `with no_mesh.activate():`): no ambient mesh, as
    in Monarch. Torch code on local tensors runs locally on the controller,
    unrecorded, even inside a mesh's activate(); an op on mesh tensors still
    records on their own mesh (`float(inspect(loss.detach()))`); a
    factory or a remote function with no mesh tensor argument has no mesh
    (NoMeshError). A mesh's activate() inside it makes that mesh ambient again."""

    def activate(self) -> "_NoMesh":
        return self

    def __enter__(self) -> None:
        global _no_mesh_depth
        _active.append(None)
        _no_mesh_depth = 1

    def __exit__(self, *exc) -> None:
        _active.pop()
        _innermost_changed()

    def __repr__(self) -> str:
        return "crown.no_mesh"


no_mesh = _NoMesh()


class _MeshMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _hooks.dispatch(func, args, kwargs or {})


_set_torch_dispatch_mode = torch._C._set_torch_dispatch_mode
_direct = threading.local()  # .on: a _DirectMode is this thread's dispatch mode now


class _DirectMode:
    """activate()'s mode set as torch's own (C++) dispatch mode, when no
    TorchDispatchMode is on Python's stack: torch 1.13 runs every op of a
    stacked mode through a contextlib manager of its own, about 3 µs per op
    (a training step's recording: 17% of it). Torch calls it with the mode
    still set, so it is off while it handles an op (the op's own torch
    calls, FakeTensor's mode). A TorchDispatchMode entered inside
    activate() would take torch's one slot and leave it empty on exit:
    enter it outside (then activate() stacks beneath it)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        _set_torch_dispatch_mode(None)
        _direct.on = False
        try:
            return _hooks.dispatch(func, args, kwargs or {})
        finally:
            _set_torch_dispatch_mode(self)
            _direct.on = True

    def on(self) -> None:
        _set_torch_dispatch_mode(self)
        _direct.on = True

    def off(self) -> None:
        _set_torch_dispatch_mode(None)
        _direct.on = False
