"""The controller side: recording torch ops on mesh tensors as commands.

record() records one op as a Call: every op is first run on the fakes of
its mesh tensors (_tensor.Tensor), at record time, so that a shape error
raises here before anything is sent. Inside `with mesh.activate():` a
TorchDispatchMode also captures factory functions (torch.rand, torch.zeros,
...), which have no tensor argument.

Autograd runs on the controller above the dispatcher, over the wrappers:
backward() and optimizer steps reach __torch_dispatch__ as ordinary ops.
An op whose output is one of its inputs (add_, out=) keeps that input's ref:
the Call lists the ref among its results (so a failure poisons it) but no
new ref is made. Views make new refs; on the workers they are real views.

In the recording layer it sits on _mesh, _tensor and _known, and below
_op_cache, which calls record() for each op it has not cached and replays
the _Entry that record() leaves in its cache; Mesh.rank() reaches record()
through _hooks (see there for the layer's order).
"""

from typing import Any, Callable, Dict, List, Optional

import torch
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException, FakeTensor)
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _execute, _hooks, _known, _mesh
from ._commands import Call
from ._execute import Input
from ._mesh import Mesh, _location, fake_mode
from ._tensor import Tensor, check_use
from .errors import (DroppedTensorError, LocalTensorError, LocalValueError, MeshMismatchError,
                     NoMeshError, RecordError, ShapeError)


# --- what record() leaves for _op_cache -------------------------------------------


class _Entry:
    """What an op does with arguments of one key: the same blob, and outputs
    of the same metadata. descs: per flattened output, a meta tuple (a fresh
    tensor), an int k (input k itself: in place, out=) or (None, value).
    record() makes it (its `cache` argument); _op_cache replays it."""

    __slots__ = ("blob", "descs", "tree", "written")

    def __init__(self, blob, descs, tree, written):
        self.blob = blob
        self.descs = descs
        self.tree = tree
        self.written = written  # input indices the op writes, beyond its outputs


_CACHE_LIMIT = 4096  # entries of one op's cache (and of one torch function's)

# What dispatch records while _op_cache learns a torch function (its _learn
# sets it): record() and _op_cache's hit path append (entry, inputs, results)
# per Call, or None for a Call that left no entry.
_captured: Optional[List[Any]] = None


# --- recording ---------------------------------------------------------------------


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
            where = "inside no_mesh" if _mesh._no_mesh_depth else "outside activate()"
            raise NoMeshError(
                f"{spec}: no mesh to record on: no argument is a mesh tensor, and it was called "
                f"{where}; call it inside `with mesh.activate():`")
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
        if len(table) >= _CACHE_LIMIT:
            table.clear()
        leaf = not isinstance(out, (list, tuple, dict))
        entry = table[key] = _Entry(blob, tuple(descs), None if leaf else out_tree,
                                     tuple(written_inputs))
    captured = _captured  # set while the fast path learns what an op records
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


_hooks.record = record  # Mesh.rank() records through it
