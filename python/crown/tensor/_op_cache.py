"""Recording an op fast (_record.py records the slow way): what each op
recorded before, keyed by its arguments' metadata and constants, replayed
without FakeTensor; and the __torch_function__ path that records an
out-of-place op on mesh tensors before torch's dispatcher. dispatch() is
where every op inside activate() arrives (_mesh._MeshMode).

The top of the recording layer: it imports the modules below it and sets
dispatch() and torch_function() in _hooks, through which Tensor and the
dispatch modes call them (see _hooks for the layer's order)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, NamedTuple, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _hooks, _known, _mesh, _native, _record, _tensor
from ._commands import Call
from .errors import LocalValueError


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
        # key of the arguments' metadata and constants -> _record._Entry
        self.cache: Dict[tuple, _record._Entry] = {}


_MISS = object()


class _Slow(Exception):
    """The fast path does not apply; _record.record() sorts it out (and raises what is wrong)."""


def _key(v, inputs: List[int], wrappers: List[_tensor.Tensor], slot: Dict[int, int]):
    t = type(v)
    if t is _tensor.Tensor:
        ref = v._ref
        if (ref is None or v._stream is not _mesh._stream_now or v._lent_mutably
                or v._known is not None):
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
    if t is float and v == 0.0:
        return (t, v, math.copysign(1.0, v))  # -0.0 == 0.0, and their ops differ
    return (t, v)


def _arguments_key(args, kwargs):
    """(key, input refs, their wrappers) of an op's arguments: their metadata
    and constants, mesh tensors by first appearance. Raises _Slow."""
    inputs: List[int] = []
    wrappers: List[_tensor.Tensor] = []
    slot: Dict[int, int] = {}
    key = tuple([_key(a, inputs, wrappers, slot) for a in args])
    if kwargs:
        key = (key, tuple([(n, _key(v, inputs, wrappers, slot)) for n, v in kwargs.items()]))
    return key, inputs, wrappers


def _outputs(mesh: _mesh.Mesh, descs, wrappers: List[_tensor.Tensor], location: str):
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
            outs.append(_tensor.Tensor(None, mesh, ref, location, d))
    return outs, results


def _fast(info: _OpInfo, args, kwargs):
    """An op seen before with arguments of the same metadata and constants:
    no fakes, no pickling. (_MISS, key) when not cached yet, (_MISS, None)
    when the fast path does not apply."""
    try:
        key, inputs, wrappers = _arguments_key(args, kwargs)
    except _Slow:
        return _MISS, None
    active = _mesh._active[-1] if _mesh._active else None
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
            return _MISS, None  # _record.record() raises the borrow's error
    for d in entry.descs:
        if type(d) is int and wrappers[d]._lent:
            return _MISS, None
    location = _mesh._location()
    outs, results = _outputs(mesh, entry.descs, wrappers, location)
    for k in entry.written:
        results.append(inputs[k])
    mesh._record(Call(results, entry.blob, inputs, location))
    if _record._captured is not None:
        _record._captured.append((entry, inputs, results))
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

_disabled = torch._C._disabled_torch_function_impl
_no_torch_function = torch._C.DisableTorchFunction
_tf_cache: Dict[Any, Dict[tuple, Any]] = {}  # func -> key -> _TfEntry, or None (always slow)


class _TfEntry(NamedTuple):
    """An op that makes one fresh tensor from its own tensor arguments (a
    tuple: tensor_fast_record.cpp reads it by position)."""

    blob: bytes
    meta: tuple  # its output's (size, stride, offset, dtype, device)
    # The Call's input k is the op's tensor argument perm[k]; None: the same order.
    perm: Optional[tuple]
    # The blob's native form for the engines (EngineBackend.record's choice, made once).
    native: Optional[bytes]


def _tf_entry(blob: bytes, meta: tuple, perm: tuple) -> _TfEntry:
    return _TfEntry(blob, meta, None if perm == tuple(range(len(perm))) else perm,
                    _native.native(blob) if _native.ENABLED else None)


# Attribute reads (t.grad, t.requires_grad: most of a training step's calls
# here) make no fresh tensor from arguments: straight through.
_ATTRIBUTE_READ = type(torch.Tensor.grad.__get__)


def torch_function(func, types, args, kwargs):
    if kwargs is None:
        kwargs = {}
    if _mesh._no_mesh_depth or not _mesh._active or type(func) is _ATTRIBUTE_READ:
        return _disabled(func, types, args, kwargs)
    try:
        key, inputs, wrappers = _arguments_key(args, kwargs)
    except _Slow:
        return _disabled(func, types, args, kwargs)
    if not wrappers:
        return _disabled(func, types, args, kwargs)
    mesh = _mesh._active[-1]
    for w in wrappers:
        if w._mesh is not mesh:
            return _disabled(func, types, args, kwargs)  # _record.record() raises what is wrong
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
    if len(mesh._dead) >= mesh._delete_batch:
        mesh._send_deletes()
    ref = mesh.backend.new_ref()
    location = _mesh._location()
    out = _tensor.Tensor(None, mesh, ref, location, entry.meta)
    perm = entry.perm
    mesh._record(Call([ref], entry.blob, inputs if perm is None else [inputs[k] for k in perm],
                      location))
    return out


def _learn(func, types, args, kwargs, table, key, inputs):
    """The first call of func with arguments of this key: through the
    dispatcher, capturing what it records; cached when it is one Call of a
    fresh tensor from the op's own tensor arguments (else: always that way)."""
    outer, _record._captured = _record._captured, []
    try:
        out = _disabled(func, types, args, kwargs)
        captured = _record._captured
    finally:
        _record._captured = outer
    if outer is not None:
        outer.extend(captured)
    entry = None
    if len(captured) == 1 and captured[0] is not None and isinstance(out, _tensor.Tensor):
        aten, call_inputs, results = captured[0]
        fresh = (aten.tree is None and not aten.written and len(results) == 1
                 and results[0] == out._ref and type(aten.descs[0]) is tuple
                 and aten.descs[0][0] is not None)
        position = {ref: k for k, ref in enumerate(inputs)}
        if fresh and all(ref in position for ref in call_inputs):
            entry = _tf_entry(aten.blob, aten.descs[0], tuple(position[ref] for ref in call_inputs))
    if len(table) >= _record._CACHE_LIMIT:
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
    if _mesh._no_mesh_depth:
        # No ambient mesh: local code runs here; an op on mesh tensors records
        # on their mesh, as outside activate() (Monarch takes an op's mesh from
        # its tensors).
        if not any(isinstance(a, _tensor.Tensor) for a in tree_flatten((args, kwargs))[0]):
            return func(*args, **kwargs)
    if info.kind == _VALUE and any(isinstance(a, _tensor.Tensor)
                                   for a in tree_flatten((args, kwargs))[0]):
        known = _known._known_values(args, kwargs)
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
    return _record.record(info.spec, func, args, kwargs, written=written, lift=info.kind == _LIFT,
                  local_runs=True, cache=(info.cache, key) if key is not None else None)


# Tensor and the dispatch modes, below this module, call these through _hooks.
_hooks.dispatch = dispatch
_hooks.torch_function = torch_function
