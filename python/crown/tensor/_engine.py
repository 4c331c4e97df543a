"""EngineBackend: the Backend of crown.tensor over crown's C++ tensor engines
(one on every proc of a ProcMesh, spawned when the mesh is first activated).

Recorded commands become engine commands: a Call runs the engine's "aten"
kernel (ATen in C++, crown.tensor._native) or its "torch" kernel
(crown.tensor._worker), a Reduce one of its MPI collectives, a
Delete forgets refs. The C++ client batches them into one cast per flush
(and every CROWN_TENSOR_BATCH commands); a fetch flushes first.
"""

import threading
from typing import Dict, Tuple

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .. import _crown, _pickle
from .._protocol import RREF
from . import _native
from ._commands import Borrow, Call, Delete, Reduce, ReturnBorrow, SwitchStream
from ._mesh import Mesh, _location, fake_mode, suspended
from ._tensor import Tensor
from .errors import RankLostError, RemoteException


def _collective(command: Reduce) -> tuple:
    """(kind, reduction) of the engine for a Reduce."""
    if command.reduction == "stack":
        return ("all_to_all" if command.scatter else "allgather"), "sum"
    return ("reduce_scatter" if command.scatter else "allreduce"), command.reduction


_REF_BLOCK = 256


class EngineFuture:
    """A fetched shard to come; get() raises RemoteException for a poisoned one."""

    def __init__(self, fetch):
        self._fetch = fetch

    def get(self, timeout=None) -> torch.Tensor:
        outcome = self._fetch.get(timeout)
        if outcome[0] == "ok":
            with suspended():  # a local tensor, even inside activate()
                return torch.from_numpy(outcome[1])
        _, op, rank, message, traceback, location, lost = outcome
        if lost is not None:
            raise RankLostError(op, rank, message, traceback, location, lost_rank=lost)
        raise RemoteException(op, rank, message, traceback, location)

    result = get

    def done(self) -> bool:
        return self._fetch.done()


_MPI_TYPES = {torch.float32: "float32", torch.float64: "float64", torch.int32: "int32",
              torch.int64: "int64", torch.int8: "int8", torch.uint8: "uint8"}


class EngineBackend:
    def __init__(self, shape: "_crown.Shape", *, seed: int = 0):
        self._client = _crown.TensorClient(shape, seed)
        self._procs = shape
        self._shape: Dict[str, int] = dict(shape.sizes)
        self._ranks = shape.ranks()  # mesh index (row-major) -> world rank
        self._next_ref = self._refs_end = 0  # the block of refs being handed out

    @property
    def shape(self) -> Dict[str, int]:
        return dict(self._shape)

    def new_ref(self) -> int:
        ref = self._next_ref
        if ref == self._refs_end:  # a block at a time: one call into C++ per 256 ops
            ref = self._client.new_refs(_REF_BLOCK)
            self._refs_end = ref + _REF_BLOCK
        self._next_ref = ref + 1
        return ref

    def record(self, command) -> None:
        kind = type(command)
        if kind is Call:
            form = _native.native(command.blob) if _native.ENABLED else None
            if form is not None:
                self._client.call_aten(command.inputs, command.results, form, command.location)
            else:
                self._client.call_torch(command.inputs, command.results, command.blob,
                                        command.location)
        elif kind is Reduce:
            collective, reduction = _collective(command)
            # The engine orders a group's members by the mesh's own order of
            # the dims, whatever order they were named in.
            dims = [d for d in self._shape if d in command.dims]
            # The source as recorded, for a small CPU collective to move its data
            # while the members agree (MPI's types only; the others go the long way).
            meta = command.source_meta
            shape, dtype = None, "float32"
            if meta is not None and meta[4].type == "cpu" and meta[3] in _MPI_TYPES:
                shape, dtype = list(meta[0]), _MPI_TYPES[meta[3]]
            self._client.collective(collective, reduction, dims, command.source, command.result,
                                    0, command.location, shape, dtype)
        elif kind is Delete:
            self._client.delete(command.refs)
        elif kind is SwitchStream:
            self._client.switch_stream(command.stream)
        elif kind is Borrow:
            self._client.borrow(command.id, command.source, command.result, command.lender,
                                command.mutable)
        elif kind is ReturnBorrow:
            self._client.return_borrow(command.id)
        else:
            raise TypeError(f"unknown tensor command {command!r}")

    def flush(self) -> None:
        self._client.flush()

    def fetch(self, ref: int, rank: int) -> EngineFuture:
        return EngineFuture(self._client.fetch(ref, self._ranks[rank]))

    def shard_token(self, ref: int) -> tuple:
        """How a mesh tensor travels to an actor of one of the mesh's procs:
        that rank's shard, read from its engine once the engine has every
        batch sent so far (the actor's message may overtake the batch)."""
        self._client.flush()
        return (_shard, (self._client.engine_local, ref, self._client.batches_sent()))

    @property
    def engine_local(self) -> int:
        return self._client.engine_local

    def slice(self, coords) -> Mesh:
        """The tensor Mesh of a slice of these procs (ProcMesh.slice's selectors)."""
        return mesh_of(self._procs.select(coords))

    def move(self, t: Tensor, target: Mesh, view: bool, location: str) -> Tensor:
        """t as a tensor of `target` (TensorClient::moveTo's routes): over
        MPI between procs, in memory within one (view: no copy)."""
        backend = target.backend
        if not isinstance(backend, EngineBackend):
            raise TypeError(f"a mesh tensor moves only to a mesh of crown's engines, not {target}")
        ref = backend.new_ref()
        t._mesh._on_stream()  # the source engines send on the tensor's stream
        target._send_deletes()  # what died there goes first: its memory, before a new shard's
        target._on_stream()
        self._client.move_to(backend._client, t._ref, ref, view, location)
        return Tensor(t.__dict__.get("_fake"), target, ref, location, t._meta)

    def sync(self):
        """Waits until every engine has run every command recorded so far;
        returns each engine's {"commands", "refs"}, by rank in the mesh."""
        return self._client.sync()


_meshes: Dict[Tuple, Mesh] = {}
_meshes_lock = threading.Lock()


def finish_all() -> None:
    """At shutdown: every mesh's engines run what they were given, so none
    runs a torch op while its process exits. Best effort: a mesh with a lost
    rank is skipped."""
    with _meshes_lock:
        meshes = list(_meshes.values())
    _finish(meshes)


def _finish(meshes) -> None:
    for mesh in meshes:
        try:
            mesh.flush()
            mesh.backend.sync()
        except Exception:  # noqa: BLE001 - its error was the program's to see; end anyway
            pass


def finish_ranks(ranks) -> None:
    """Before procs of `ranks` end (ProcMesh.stop of started procs): every
    mesh on any of them runs what it was given, then is forgotten, so that
    a later mesh of the same shape spawns engines anew. Best effort, as
    finish_all."""
    ranks = set(ranks)
    with _meshes_lock:
        ending = [key for key in _meshes if ranks.intersection(key[1])]
        meshes = [_meshes.pop(key) for key in ending]
    _finish(meshes)


def mesh_of(shape: "_crown.Shape") -> Mesh:
    """The tensor Mesh of the procs of `shape`: made (its engines spawned) on
    first use, then the same one for every ProcMesh of that shape."""
    key = (tuple(shape.labels), tuple(shape.ranks()))
    with _meshes_lock:
        mesh = _meshes.get(key)
        if mesh is None:
            mesh = _meshes[key] = Mesh(EngineBackend(shape))
        return mesh


def _shard(engine_local: int, ref: int, batches: int) -> torch.Tensor:
    """On the actor's rank: its shard of the tensor (no copy)."""
    x = _crown.engine_shard(engine_local, ref, batches)
    return torch.from_numpy(x) if not isinstance(x, torch.Tensor) else x


def _keep(engine_local: int, ref: int, value: torch.Tensor) -> tuple:
    _crown.engine_define(engine_local, ref, value)
    return (tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype,
            value.device)


def keep_on_engine(engine_local: int, refs, value):
    """On the actor's rank (rref): defines refs on this rank's engine as the
    endpoint's results; returns their metadata for the controller. refs is
    one ref (no propagator: the result is one tensor), or a tuple of them,
    one per tensor its propagator gave, kept in that order from the
    result's pytree (none: the result is not kept)."""
    if type(refs) is int:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"rref needs the endpoint to return a torch.Tensor, not "
                            f"{type(value).__name__} (or give the endpoint a propagate= that "
                            f"says which of its results are tensors)")
        return _keep(engine_local, refs, value)
    if not refs:
        return None
    tensors = [leaf for leaf in tree_flatten(value)[0] if isinstance(leaf, torch.Tensor)]
    if len(tensors) != len(refs):
        raise TypeError(f"rref: the endpoint's propagate gave {len(refs)} tensor(s), but the "
                        f"endpoint returned {len(tensors)} ({type(value).__name__})")
    return tuple(_keep(engine_local, ref, t) for ref, t in zip(refs, tensors))


def _propagated(spec: str, propagate, args, kwargs):
    """The propagator's outputs for rref (Monarch's _do_propagate): run on
    fakes of the arguments' tensors, as @remote's is."""
    if propagate == "inspect":
        return None
    if propagate == "mocked":
        raise NotImplementedError("mocked propagation")  # Monarch's words: it has none either

    def fake(x):
        if isinstance(x, Tensor):
            return x._fake
        if isinstance(x, torch.Tensor):
            return fake_mode().from_tensor(x)
        return x

    with suspended():
        fargs, fkwargs = tree_map(fake, (args, kwargs))
        try:
            with fake_mode():
                return propagate(*fargs, **fkwargs)
        except Exception as e:
            e.add_note(f"{spec}: raised by the endpoint's propagate, run on the arguments' "
                       f"fake tensors on the controller")
            raise


def rref(shape, actor_local: int, name, args, kwargs, entries, propagate=None):
    """EndpointRef.rref: every actor's result kept on its rank as a mesh
    tensor. With a propagator (a function, or "inspect"), the tensors of its
    outputs say which of the results are kept: rref returns the propagator's
    pytree with each tensor a mesh tensor (None for "inspect"). A mesh
    tensor's metadata is the actors' result's (the same on every actor, or
    ValueError), not the propagator's."""
    spec = f"rref({name if isinstance(name, str) else name[1]})"
    mesh = mesh_of(shape)
    backend = mesh.backend
    single = propagate is None or propagate == "cached"
    if single:
        out, tree, picks = None, None, []
        refs = backend.new_ref()
    else:
        out = _propagated(spec, propagate, args, kwargs)
        flat, tree = tree_flatten(out)
        picks = [j for j, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]
        refs = tuple(backend.new_ref() for _ in picks)
    mesh.flush()  # the engines run (and register) before the actors store into them
    parts = _pickle.dumps_parts(((RREF, name, backend.engine_local, refs), args, kwargs))
    replies = entries(_crown.cast_call(shape, actor_local, *parts).get(None))
    metas = set()
    for rank, meta, error in replies:
        if error is not None:
            raise error
        metas.add(meta)
    if len(metas) != 1:
        raise ValueError(f"{spec}: the actors returned tensors of different shapes, "
                         f"strides or dtypes: {sorted(map(str, metas))}")
    meta = metas.pop()
    location = _location()
    with suspended():
        if single:
            return Tensor(None, mesh, refs, location, meta)
        if not picks:
            return out
        for j, ref, m in zip(picks, refs, meta):
            flat[j] = Tensor(None, mesh, ref, location, m)
        return tree_unflatten(flat, tree)
