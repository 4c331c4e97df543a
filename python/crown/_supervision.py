"""Failures of mesh members, told to the mesh's owner (design.md's failure model).

A member dies on its rank when an endpoint with no caller raises (a
broadcast, a port's send), or when a BaseException such as SystemExit
escapes any endpoint; it then refuses every message with the cause
(SupervisionError). It also dies with its process (rank_lost). The C++ supervision layer tells the rank that spawned
the mesh, where member_failed() runs: the owner is the actor whose endpoint
spawned it, which hears through its ``__supervise__`` in its own turn, or
the controller, whose ``crown.actor.unhandled_fault_hook`` is called. The
default hook ends the job non-zero (Monarch's default): the report is
printed, the controller's main thread gets a KeyboardInterrupt, and the job's
exit code is 1 whatever main does next.
"""

from __future__ import annotations

import _thread
import contextlib
import sys
import threading
from typing import Dict, List, NamedTuple, Optional, Set, Tuple

from . import _crown, _pickle, _runtime


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
        return (f"actor mesh '{self.mesh_name}': the member on rank {self.rank} "
                f"({self.host}) died: {self.cause}")

    def __str__(self):
        return self.report()

    def __repr__(self):
        return f"MeshFailure(mesh_name={self.mesh_name!r}, rank={self.rank}, host={self.host!r})"


class _Owned(NamedTuple):
    owner: Optional[int]  # the owning actor's local id on this rank; None: the controller
    shape: _crown.Shape
    cls: type
    name: str
    spawning: object = None  # actor._Spawning while the members are constructed


_owned: Dict[int, _Owned] = {}  # mesh id -> who owns it (meshes spawned on this rank)
_reported: Set[Tuple[int, int]] = set()  # (mesh id, rank): each member's death is told once
_stopped: Dict[int, Set[int]] = {}  # mesh id -> its ranks stopped so far (a slice at a time)
_lock = threading.Lock()
# Held from a spawn's start until its owner is recorded (spawning()): a
# constructor that fails at once reports before spawn() could call
# spawned(), and the report must find the owner, not fall to the controller.
# Reentrant: a report on the spawning thread itself passes.
_spawn_lock = threading.RLock()
unhandled = []  # failures no hook handled on this rank: the job ends non-zero


_system = threading.local()  # .spawning: crown's own actors are spawned on this thread


@contextlib.contextmanager
def system_spawn():
    """Spawns within belong to crown (the port actor), not to the actor or
    controller that happens to run: nobody stops them but the job's end."""
    _system.spawning = True
    try:
        yield
    finally:
        _system.spawning = False


@contextlib.contextmanager
def spawning():
    """Around starting a spawn and its spawned(): members' failures reported
    meanwhile wait for the owner to be known."""
    with _spawn_lock:
        yield


def spawned(local: int, shape, cls: type, name: str, spawning=None) -> None:
    """Remembers who owns a mesh just spawned here: the actor whose endpoint
    runs on this thread, else the controller."""
    if getattr(_system, "spawning", False):
        return
    actor = _runtime.current_actor()  # also on an actor's loop thread
    with _lock:
        _owned[local] = _Owned(actor[1] if actor is not None else None, shape, cls, name,
                               spawning)


def owned(local: int) -> Optional[_Owned]:
    """Who owns mesh `local`, if it was spawned on this rank."""
    with _lock:
        return _owned.get(local)


def forget(local: int) -> None:
    """The whole mesh was stopped: nobody needs its owner any more."""
    with _lock:
        _owned.pop(local, None)
        _stopped.pop(local, None)


def members_stopped(local: int, ranks) -> None:
    """ActorMesh.stop stopped the members of mesh `local` on `ranks`: once
    every member has been, one slice or another, the owner forgets it."""
    with _lock:
        owned = _owned.get(local)
        if owned is None:
            return
        stopped = _stopped.setdefault(local, set())
        stopped.update(ranks)
        if stopped >= set(owned.shape.ranks()):
            _owned.pop(local, None)
            _stopped.pop(local, None)


def owned_by(owner: Optional[int]) -> List[int]:
    """The meshes that `owner` (None: the controller) spawned on this rank."""
    with _lock:
        return [local for local, owned in _owned.items() if owned.owner == owner]


def stop_mesh(local: int) -> None:
    """Stops mesh `local`, spawned on this rank, as ActorMesh.stop does."""
    from .actor import ActorMesh

    mesh = owned(local)
    if mesh is not None:
        ActorMesh(mesh.shape, local, mesh.cls, mesh.name, mesh.spawning).stop()


def stop_owned(owner: Optional[int], ranks=None) -> None:
    """Stops the meshes that `owner` (an actor's local id here; None: the
    controller) spawned on this rank: all of them, or with `ranks` only their
    members on those ranks (ProcMesh.stop of a slice), leaving the members
    elsewhere serving. Members stopped before are not asked again."""
    from .actor import ActorMesh

    with _lock:
        meshes = []
        for local, owned in _owned.items():
            if owned.owner != owner:
                continue
            members = set(owned.shape.ranks()) - _stopped.get(local, set())
            if ranks is not None:
                members &= ranks
            if members:
                meshes.append((local, owned, sorted(members)))
    for local, owned, members in meshes:
        shape = (owned.shape if members == sorted(owned.shape.ranks())
                 else _crown.Shape.of_ranks("ranks", members))
        ActorMesh(shape, local, owned.cls, owned.name, owned.spawning).stop()


def rank_lost(rank: int, host: str, cause: str) -> None:
    """From the supervision agent of this rank: process `rank` is lost, and
    its member of every mesh with it. The owner of each such mesh spawned
    here hears, as of any member's death (Monarch: a process that exits,
    crashes or misses its heartbeats is a supervision event)."""
    with _lock:
        hit = [(local, owned.name) for local, owned in _owned.items()
               if rank in owned.shape.ranks()]
    for local, name in hit:
        member_failed(local, rank, host, name, f"its process was lost: {cause}")


def member_failed(mesh: int, rank: int, host: str, name: str, cause: str) -> None:
    """From the supervision agent of this rank (python/src/bind_runtime.cpp), one
    report at a time."""
    with _spawn_lock, _lock:
        owned = _owned.get(mesh)
        if (mesh, rank) in _reported:
            return  # it died, and then its process went too: one failure
        _reported.add((mesh, rank))
    from .actor import ActorMesh

    actor_mesh = ActorMesh(owned.shape, mesh, owned.cls, name) if owned else None
    failure = MeshFailure(actor_mesh, name, rank, host, cause)
    if owned is not None and owned.owner is not None:
        # In the owner's turn, as a one-way call: when it is not handled the
        # owner dies of it, and its own owner hears (PyActor, _runtime.supervise).
        _crown.send(_crown.rank(), owned.owner,
                    *_pickle.dumps_parts((_runtime.SUPERVISE, (failure,), {})))
        return
    _fault_on_controller(failure)


def _fault_on_controller(failure) -> None:
    from . import actor

    try:
        actor.unhandled_fault_hook(failure)
    except BaseException:  # noqa: BLE001 - sys.exit included: the fault is unhandled
        print(f"crown: unhandled failure, ending the job: {failure.report()}", file=sys.stderr,
              flush=True)
        unhandled.append(failure)
        _thread.interrupt_main()  # only the main thread may end the program
