"""Meshes: ProcMesh (ranks with named dimensions), ActorMesh (the actors
spawned on one) and this_proc(); hosts are _hosts.py's.

Spawning registers each mesh with _supervision (its class, to rebuild the
ActorMesh a failure names) and runs the actors' constructors through
_endpoints._construct; calls go through _calls.EndpointRef. crown.actor
re-exports what users name.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from typing import Callable, Generic, Optional, Set, TypeVar

from . import _client, _context, _crown, _pickle, _protocol, _supervision
from ._calls import EndpointRef, NotAnEndpoint
from ._context import current_actor
from ._endpoints import Actor, _check_endpoint_kinds, _construct, _unpicklable, endpoint
from ._values import Future, _Sliceable

R = TypeVar("R")

SupervisionError = _crown.SupervisionError
MeshError = _crown.MeshError
Shape = _crown.Shape


class ProcMesh(_Sliceable):
    """Processes (ranks) with named dimensions."""

    def __init__(self, shape: Shape, stopped: Optional[Set[int]] = None,
                 of_started: bool = False, name: Optional[str] = None, starting=None,
                 stop_started: Optional[Callable[[], None]] = None):
        self._shape = shape
        self._name = name or "anon"
        self._initialized: Optional[Future] = None  # a launch's ranks' bootstrap, when given
        # The start of its processes (_client.Starting), under way or over:
        # what needs them up waits for it (_ready), shared with every slice.
        self._starting = starting
        # Ends the processes spawn_procs started for this mesh (_hosts.stop_procs);
        # None for a slice, a copy, or ranks of a launch.
        self._stop_started = stop_started
        # The ranks stop() was called on, shared with every slice of this mesh
        # (and the mesh it was sliced from): a stop reaches exactly its ranks.
        self._stopped = stopped if stopped is not None else set()
        self._of_started = of_started  # a slice or a copy of such a mesh: it cannot stop them

    def _with(self, shape):
        return ProcMesh(shape, self._stopped, of_started=self._on_started_procs(),
                        starting=self._starting)

    def _ready(self, timeout: Optional[float] = None) -> None:
        """Waits until its started processes are up (and bootstrapped);
        raises why they are not."""
        if self._starting is not None:
            self._starting.wait(timeout)

    def _on_started_procs(self) -> bool:
        """Its procs were started by spawn_procs (it, or the mesh it came from, ends them)."""
        return self._stop_started is not None or self._of_started

    @property
    def initialized(self) -> Future:
        """Monarch's: a Future of True once every proc is up and has run
        spawn_procs' bootstrap; raises the bootstrap's ActorError if it
        failed, or why the processes could not start."""
        if self._initialized is not None:
            return self._initialized

        def up(timeout):
            self._ready(timeout)
            return True

        return Future(up)

    def __reduce__(self):
        self._ready()  # whoever receives it may use the procs at once
        # A copy owns no processes: only the mesh spawn_procs returned stops them.
        return (ProcMesh, (self._shape, set(self._stopped), self._on_started_procs()))

    def stacks(self, native: bool = False, timeout: float = 5.0):
        """The stacks of every thread of every process of this mesh, asked of
        all at once: a ``crown._stacks.Stacks``, whose str() merges the
        threads alike across ranks ("ranks 0-3,5: ...") so the odd one out
        stands out, and whose ``by_rank`` holds each rank's own. Python's come
        from faulthandler's signal-safe dump, so a rank spinning in C with the
        GIL held answers too; ``native=True`` adds eu-stack's (elfutils) native
        frames. A rank that is lost or silent past `timeout` says why."""
        from . import _stacks

        self._ready()
        return _stacks.collect(self._shape.ranks(), native, timeout)

    def logging_option(self, stream_to_client: bool = False,
                       aggregate_window_sec: Optional[float] = None,
                       level: int = logging.INFO) -> Future:
        """Monarch's knobs (and defaults) for the output of these procs.
        With ``stream_to_client`` their stdout, stderr and logging records
        reach the controller's terminal as "[rank 3] ...", and with
        ``aggregate_window_sec`` the same line from many ranks within that
        many seconds is printed once ("[ranks 0-15] ..."; None or 0: each
        line at once). Without it each rank writes to its own file under
        CROWN_LOG_DIR (default ./crown-logs), whose name is printed; a window
        then raises ValueError. ``level`` is the level of every rank's root
        logger. Until the first call, output is forwarded with a window of
        CROWN_LOG_WINDOW (3 s). Returns a done Future."""
        from . import _logs

        self._ready()
        _logs.logging_option(self, stream_to_client, aggregate_window_sec, level)
        return Future(lambda timeout: None)

    def respawn_lost(self) -> "ProcMesh":
        """The same mesh at full size again: each lost rank is replaced by a
        new process (MPI_Comm_spawn, under mpirun) that takes the lost one's
        place in every dimension, under a new rank number. Returns itself when
        none is lost. The replacements hold no actors yet: spawn on the mesh
        this returns. Raises CrownError where the launcher cannot start
        processes (srun: carry on with survivors() there), when the spare rank
        slots are spent (CROWN_SPARE_RANKS, by default the job's size), or
        when a process cannot start or join in time. Replacements are outside
        MPI_COMM_WORLD, so MPI collectives and RDMA windows do not reach them."""
        self._ready()
        lost = [rank for rank in self._shape.ranks() if not _crown.alive(rank)]
        if not lost:
            return self
        made = _crown.respawn(lost)
        return self._with(self._shape.replacing(dict(zip(lost, made))))

    def stop(self) -> Future:
        """Stops the members on these procs of every actor mesh that this owner
        (the controller, or the actor whose endpoint runs this) spawned, each
        as ActorMesh.stop does (a mesh that also spans other procs keeps its
        members there), and spawns on these ranks fail from then on, through
        this ProcMesh or any mesh it was sliced from or sliced into; other
        ranks of those meshes spawn and serve as before. Procs that
        spawn_procs started (a controller that no launcher started) then end,
        and this returns once they are gone; a second stop() does nothing.
        Procs of a launch live on: the launcher started them, and they serve
        other meshes until the job ends (a new ``crown.world()`` spawns
        there). Returns a done Future (``await procs.stop()`` works).
        Raises RuntimeError on a slice or a copy of started procs, as Monarch
        does: only their owner ends them."""
        if self._stop_started is None and self._of_started:
            raise RuntimeError(f"only the ProcMesh that spawn_procs returned stops its procs; "
                               f"this ({self._shape}) is a slice or a copy of it")
        try:
            self._ready()
        except Exception:  # noqa: BLE001 - procs that could not start are ended all the same
            pass
        ranks = set(self._shape.ranks())
        engines = sys.modules.get("crown.tensor._engine")  # loaded only by a program using tensors
        if self._stop_started is not None and engines is not None:
            engines.finish_ranks(ranks)  # before their engines stop with the actors below
        actor = current_actor()
        _supervision.stop_owned(actor[1] if actor is not None else None, ranks)
        self._stopped.update(ranks)
        if self._stop_started is not None:
            self._stop_started()
        return Future(lambda timeout: None)

    def spawn(self, name: str, cls: type, *args, **kwargs) -> "ActorMesh":
        """One ``cls(*args, **kwargs)`` on every proc. Returns at once, as in
        Monarch: the members are constructed meanwhile, each in its own first
        turn, and calls to a member wait behind its constructor (a member
        whose ``__init__`` blocks holds up no other member, mesh or spawn).
        A constructor that raises is a supervision failure of that
        member, delivered to the owner (the spawning actor's
        ``__supervise__``, or the controller's ``unhandled_fault_hook``);
        calls to that member raise SupervisionError with the original
        traceback. Wrong use (not an Actor subclass, arguments that cannot be
        pickled, ranks of a stopped ProcMesh) raises here, before anything is
        sent."""
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn needs an Actor subclass, not {cls!r}")
        self._ready()  # started processes: up (and bootstrapped), or why not
        stopped = self._stopped.intersection(self._shape.ranks())
        if stopped:
            raise RuntimeError(f"cannot spawn '{name}': this ProcMesh ({self._shape}) was "
                               f"stopped on ranks {sorted(stopped)} (ProcMesh.stop); a slice "
                               f"without them spawns")
        _check_endpoint_kinds(cls)  # MixedEndpointsError, before anything is sent
        try:
            payload = _pickle.dumps((_construct, (name, cls, *args), kwargs))
        except Exception as e:  # noqa: BLE001 - pickling fails in many types
            raise _unpicklable(e, f"spawn({name!r}, {cls.__qualname__})", args, kwargs,
                               (("the actor class", cls),)) from None
        # The class is registered before the spawn leaves; the supervision
        # module records the owner (the actor this thread acts for, or the
        # controller) as it leaves, so a constructor that fails at once is
        # reported to the right owner with the right class.
        local = _crown.new_mesh_id()
        spawning = _Spawning(None, name)
        _supervision.register(local, cls, spawning)
        try:
            _, spawning._pending = _crown.spawn_start(self._shape, name, payload, local)
        except BaseException:
            _supervision.unregister(local)  # refused (no owner on a worker's stranger thread)
            raise
        mesh = ActorMesh(self._shape, local, cls, name, spawning)
        if _context.mesh_spawned is not None and current_actor() is None:
            _context.mesh_spawned(name, mesh)  # an attached client's: kept for the next one
        return mesh

    def activate(self):
        """``with procs.activate():`` records torch code on these procs
        (crown.tensor): factories make a shard on every proc, ops on them run
        there, and results stay there until fetched (crown.fetch_shard,
        crown.inspect). The first use spawns a tensor engine on every proc."""
        return self.tensors().activate()

    def tensors(self):
        """The crown.tensor.Mesh of these procs (for mesh.rank(dims), flush())."""
        from .tensor._engine import mesh_of

        self._ready()
        return mesh_of(self._shape)

    def __repr__(self):
        return f"ProcMesh({self._shape})"


class _Spawning:
    """A spawn under way (ProcMesh.spawn returned at once): wait() returns once
    every member is hosted on its proc. Its __init__ runs in its own first
    turn (Actor::onStart), so calls to a member wait behind its constructor,
    not the mesh's first use behind every member's; a constructor that fails
    kills its member (the owner hears, and calls to it then say)."""

    SAY_EVERY_S = 30.0  # a spawn not delivered this long is said to be

    def __init__(self, pending, name: str):
        self._pending = pending
        self._name = name
        self._done = False
        self._lock = threading.Lock()

    def wait(self) -> None:
        if self._done:
            return
        with self._lock:
            if not self._done:
                waited = 0.0
                while not self._pending.wait(self.SAY_EVERY_S):
                    waited += self.SAY_EVERY_S
                    _crown.log("warn", f"actor mesh {self._name!r}: the spawn has not reached "
                                       f"every member after {waited:.0f} s; the first use of "
                                       f"the mesh waits until it has")
                self._pending.get()
                self._done = True
                self._pending = None


class ActorMesh(_Sliceable, Generic[R]):
    """One actor per proc of a mesh; its endpoints are attributes with adverbs."""

    # How long stop() lets a member's __init__ run on before stopping it
    # without one: long enough for a constructor that is merely queued
    # behind others on its proc, short enough not to look hung.
    STOP_CONSTRUCTING_AFTER_S = 2.0

    def __init__(self, shape: Shape, local: int, cls: type, name: str,
                 spawning: Optional[_Spawning] = None):
        self._shape, self._local, self._cls, self._name = shape, local, cls, name
        self._spawning = spawning

    def _with(self, shape):
        return ActorMesh(shape, self._local, self._cls, self._name, self._spawning)

    def _ready(self) -> None:
        """Nothing is sent to the members before they exist: the first use
        waits for the spawn (each endpoint is looked up once per mesh object)."""
        if self._spawning is not None:
            self._spawning.wait()

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if not isinstance(inspect.getattr_static(self._cls, name, None), endpoint):
            if name in dir(self._cls):  # Monarch's: as_endpoint(mesh.name) calls it
                return NotAnEndpoint(self, name)
            raise AttributeError(f"{self._cls.__name__} has no endpoint {name!r}")
        self._ready()
        ref = self.__dict__[name] = EndpointRef(self, name)  # found directly from now on
        return ref

    def stop(self) -> Future:
        """Stops every actor of this mesh (or slice) after the messages sent
        to it before, and every proc forgets them (Monarch's ActorMesh.stop).
        First, in each member's turn, the meshes it spawned stop and its
        ``__cleanup__(None)`` runs. Blocks until each live member has stopped
        (a lost or dead one counts as stopped); raises MeshError naming any
        that could not be. Later calls to them fail with ActorStoppedError.
        Returns a Future that is already done, so ``mesh.stop().get()`` and
        ``await mesh.stop()`` read as in Monarch. A member whose ``__init__``
        has not returned within STOP_CONSTRUCTING_AFTER_S is stopped without
        waiting for it (no ``__cleanup__``: it has no instance yet), so a
        constructor that never returns does not hold up the stop."""
        self._ready()
        finishing = _crown.cast_call(self._shape, self._local,
                                     *_pickle.dumps_parts((_protocol.STOP, (), {})))
        if not finishing.wait(self.STOP_CONSTRUCTING_AFTER_S):
            # Those still in __init__ go now; their stop is refused, which
            # completes it. Members busy in an endpoint are waited for.
            _crown.stop_mesh(self._shape, self._local, only_starting=True)
        finishing.get()  # a member that is gone already has nothing left to finish
        _crown.stop_mesh(self._shape, self._local)
        _supervision.members_stopped(self._local, self._shape.ranks())
        if _context.mesh_stopped is not None:
            _context.mesh_stopped(self._local)
        return Future(lambda timeout: None)

    def __reduce__(self):
        self._ready()  # whoever receives it may send to the members at once
        return (ActorMesh, (self._shape, self._local, self._cls, self._name))

    def __repr__(self):
        return f"ActorMesh({self._name!r}, {self._cls.__name__}, {self._shape})"


def this_proc() -> ProcMesh:
    """The ProcMesh of just the process this code runs on (no dimensions), as
    in Monarch: the controller's in main(), an actor's own inside its
    endpoints. ``this_proc().spawn(...)`` puts one actor there."""
    _client.ensure_started()
    return ProcMesh(Shape([("ranks", _crown.size())]).select({"ranks": _crown.rank()}))
