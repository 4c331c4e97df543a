"""Failures of mesh members, told to the mesh's owner (design.md's failure model).

A member dies on its rank when an endpoint with no caller raises (a
broadcast, a port's send), or when a BaseException such as SystemExit
escapes any endpoint; it then refuses every message with the cause
(SupervisionError). It also dies with its process. The C++ supervision
module (src/supervision/) records the owner of every mesh as it is spawned
(the actor this thread acts for: its endpoint, __init__, loop thread or a
thread it started; else the controller), and tells it once per member: an
owning actor through a Supervise message that PyActor hands to
_runtime.supervise_in_turn (its ``__supervise__``, in its own turn), the
controller through member_failed() here, whose
``crown.actor.unhandled_fault_hook`` is called. This module keeps only the
Python side: MeshFailure, the classes of the meshes spawned here, and stop
by owner. The
default hook ends the job non-zero (Monarch's default): a hook that raises
leaves the fault unhandled, member_failed says so to the supervision
module, and the module ends the job (supervision/job_end.h: the report is
printed, main's crown waits raise UnhandledFault and main gets a SIGINT,
and the job exits 1 within CROWN_FAULT_GRACE_MS whatever main does next).
"""

from __future__ import annotations

import threading
from typing import Dict, List, NamedTuple, Optional

from . import _actor_shim, _crown


class MeshFailure:
    """A member of a mesh you own died: ``mesh`` (the ActorMesh), ``mesh_name``,
    ``rank`` and ``host`` of the member, ``cause`` (why, with the Python
    traceback), and ``report()``, the text to print."""

    def __init__(self, mesh, mesh_name: str, rank: int, host: str, cause: str):
        self.mesh = mesh
        self.mesh_name = mesh_name
        self.rank = rank
        self.host = host
        self.cause = cause

    def report(self) -> str:
        # Monarch's sentence first (programs match on it), then crown's account.
        return (f"The actor {self.mesh_name} and all its descendants have failed: "
                f"actor mesh '{self.mesh_name}': the member on rank {self.rank} "
                f"({self.host}) died: {self.cause}")

    def __str__(self):
        return self.report()

    def __repr__(self):
        return f"MeshFailure(mesh_name={self.mesh_name!r}, rank={self.rank}, host={self.host!r})"


class _Registered(NamedTuple):
    cls: type
    spawning: object = None  # _meshes._Spawning while the members are constructed


# What C++ cannot hold of a mesh spawned on this rank: its Python class and
# spawn, to rebuild the ActorMesh (MeshFailure.mesh, stop). Who owns it, its
# shape and which members were stopped live in the supervision module
# (_crown.owned_mesh, owned_by, members_stopped).
_registered: Dict[int, _Registered] = {}
_lock = threading.Lock()


def register(local: int, cls: type, spawning=None) -> None:
    """Before a spawn of mesh `local` leaves this rank (its owner is recorded
    by the supervision module as it leaves): its class, for the reports."""
    with _lock:
        _registered[local] = _Registered(cls, spawning)


def unregister(local: int) -> None:
    with _lock:
        _registered.pop(local, None)


def _mesh(local: int, shape=None, name: Optional[str] = None):
    """The ActorMesh of mesh `local` spawned here (None when unknown)."""
    owned = _crown.owned_mesh(local)
    with _lock:
        registered = _registered.get(local)
    if owned is not None:
        _, _, shape, name, _ = owned
    if registered is None or shape is None:
        return None
    return _actor_shim.actor_mesh()(shape, local, registered.cls, name, registered.spawning)


def members_stopped(local: int, ranks) -> None:
    """ActorMesh.stop stopped the members of mesh `local` on `ranks`: once
    every member has been, one slice or another, the owner forgets it."""
    _crown.members_stopped(local, list(ranks))
    if _crown.owned_mesh(local) is None:
        with _lock:
            _registered.pop(local, None)


def owned_by(owner: Optional[int]) -> List[int]:
    """The meshes that `owner` (an actor's local id here; None: the
    controller) spawned on this rank and that have members not stopped."""
    return [entry[0] for entry in _crown.owned_by(owner)]


def stop_mesh(local: int) -> None:
    """Stops mesh `local`, spawned on this rank, as ActorMesh.stop does (its
    members not stopped yet)."""
    stop_owned_meshes([entry for entry in (_crown.owned_mesh(local),) if entry is not None])


def stop_owned(owner: Optional[int], ranks=None) -> None:
    """Stops the meshes that `owner` (an actor's local id here; None: the
    controller) spawned on this rank: all of them, or with `ranks` only their
    members on those ranks (ProcMesh.stop of a slice), leaving the members
    elsewhere serving. Members stopped before are not asked again."""
    stop_owned_meshes(_crown.owned_by(owner), ranks)


def stop_owned_meshes(entries, ranks=None) -> None:
    """Stops the Python actor meshes among `entries` (_crown.owned_by's),
    restricted to `ranks` when given."""
    for local, _, shape, name, live in entries:
        members = [rank for rank in live if ranks is None or rank in ranks]
        if not members:
            continue
        with _lock:
            registered = _registered.get(local)
        if registered is None:
            continue  # not a Python actor mesh (a tensor engine's): its owner stops it
        if members != shape.ranks():
            shape = _crown.Shape.of_ranks("ranks", members)
        _actor_shim.actor_mesh()(shape, local, registered.cls, name, registered.spawning).stop()


def failure(mesh: int, rank: int, host: str, name: str, cause: str) -> MeshFailure:
    """A report of the supervision module as Python reads it (PyActor hands
    it to the owning actor's __supervise__)."""
    return MeshFailure(_mesh(mesh, name=name), name, rank, host, cause)


def member_failed(mesh: int, rank: int, host: str, name: str, cause: str) -> bool:
    """From the supervision module of this rank (python/src/bind_runtime.cpp),
    one report at a time: a member of a mesh the controller owns died (the
    module routes the reports of actors' meshes to those actors, dedupes,
    and fans a lost process out over the meshes it held). Runs the hook and
    says whether the fault was handled: False when the hook raised
    (sys.exit included), and then the module ends the job. A mesh that is no
    Python actor mesh (a tensor engine's, spawned from C++) is its own
    layer's to report: its operations fail with the member (docs/tensors.md);
    True, nothing to do here."""
    with _lock:
        if mesh not in _registered:
            return True
    try:
        _actor_shim.unhandled_fault_hook(failure(mesh, rank, host, name, cause))
    except BaseException:  # noqa: BLE001 - sys.exit included: the fault is unhandled
        return False
    return True
