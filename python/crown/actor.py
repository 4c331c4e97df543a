"""crown's actor API, after PyTorch Monarch's ``monarch.actor``.

Actors are classes deriving from :class:`Actor` whose methods marked
:func:`endpoint` can be called from elsewhere through an adverb::

    counters = crown.world().spawn("counter", Counter, 0)
    counters.incr.call(2).get()        # ValueMesh: every actor's reply (raises if one failed)
    counters.incr.call(2).value_mesh() # ValueMesh with each failed member's error in place
    counters.slice(procs=0).incr.call_one().get()
    counters.incr.choose().get()       # one actor, a different one each time
    for future in counters.incr.stream(): future.get()   # replies as they arrive
    counters.incr.broadcast()          # no replies
    counters.stop().get()              # the actors go; later calls fail

Calls travel through crown's C++ runtime (casts through multicast trees);
arguments and results are pickled (protocol 5, arrays out of band). Every
rank runs the same script, so classes and functions defined in it exist
everywhere; anything else travels by value (cloudpickle). An endpoint that
raises in a call with no caller (broadcast, a port's send) is logged on its
rank with its traceback and handed to crown's supervision path. One-way
messages lost for good (broadcasts lost with a cast hop that died, beyond
what its parent could resend) are reported to the sending rank, which hands
them to :func:`unhandled_fault_hook`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import math
import queue
import sys
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar

from . import _crown, _pickle, _placement, _runtime, _sent, _supervision
from ._shape import Slice
from ._supervision import MeshFailure

__all__ = [
    "Actor", "endpoint", "concurrent_endpoint", "ActorMesh", "ProcMesh", "ValueMesh", "Future", "Point",
    "ActorError", "ActorStoppedError", "SupervisionError", "MeshError", "Channel", "Port",
    "PortReceiver",
    "Accumulator", "current_rank", "current_size", "current_actor_name", "context", "this_host",
    "this_proc", "HostMesh", "Shape", "Slice", "MessagesLost", "MeshFailure",
    "unhandled_fault_hook",
]

R = TypeVar("R")

SupervisionError = _crown.SupervisionError
MeshError = _crown.MeshError
Shape = _crown.Shape


class ActorError(_crown.RemoteActorError):
    """An endpoint raised. ``rank`` and ``actor`` say where, ``traceback`` holds
    the remote traceback text, and the original exception is ``exception``
    (and ``__cause__``) when it could be pickled."""

    def __init__(self, message, *, rank=None, actor=None, remote_type=None, traceback=None,
                 exception=None):
        super().__init__(message)
        self.rank = rank
        self.actor = actor
        self.remote_type = remote_type
        self.traceback = traceback
        self.exception = exception


class ActorStoppedError(ActorError, _crown.ActorStoppedError):
    """A call reached an actor that was stopped (ActorMesh.stop). Both an
    ActorError (``rank``, ``actor``) and crown's ActorStoppedError."""


class MessagesLost:
    """A fault that no caller hears of: the actor ``actor`` (its name) on rank
    ``rank`` gave up waiting for ``count`` one-way messages (numbers ``first``
    to ``last``) that ``sender`` (rank, local id) sent it, after the order gap
    timeout (CROWN_ORDER_GAP_TIMEOUT_MS). In practice: broadcasts lost with a
    cast hop that died, beyond what its parent could resend
    (CROWN_CAST_RESEND_WINDOW). ``str()`` says all that."""

    def __init__(self, sender, rank, actor, count, first, last, message):
        self.sender = sender
        self.rank = rank
        self.actor = actor
        self.count = count
        self.first = first
        self.last = last
        self.message = message

    def __str__(self):
        return self.message

    def __repr__(self):
        return f"MessagesLost({self.message!r})"


def unhandled_fault_hook(failure) -> None:
    """Called on the controller with each fault that nothing else handles: a
    :class:`MeshFailure` (a member of a mesh the controller spawned died, or
    an actor's ``__supervise__`` passed one up), or a :class:`MessagesLost`
    (on the rank that sent the lost messages). Replace it
    (``crown.actor.unhandled_fault_hook = my_hook``, Monarch's name) to act on
    it; it runs on a runtime thread, so it should return quickly. Returning
    drops the fault. Raising (the default raises SystemExit(1) for a
    MeshFailure, as Monarch's does) leaves it unhandled: crown prints the
    report, interrupts the main thread (KeyboardInterrupt) and the job exits
    1. The default prints a MessagesLost and returns."""
    if isinstance(failure, MeshFailure):
        sys.exit(1)
    print(f"crown: unhandled fault: {failure}", file=sys.stderr, flush=True)


def _messages_lost(sender, rank, actor, count, first, last, message):
    # The runtime's hook (python/src/bind_runtime.cpp), with the GIL. The
    # module's hook is looked up at each call, so a replacement counts at once.
    try:
        unhandled_fault_hook(MessagesLost(sender, rank, actor, count, first, last, message))
    except BaseException:  # noqa: BLE001 - a failing hook must not take the runtime down
        traceback.print_exc()


class Actor:
    """Base of every actor class. Construct actors with ProcMesh.spawn.

    Two methods a subclass may define (plain or ``async def``), as in Monarch:
    ``__supervise__(self, failure: MeshFailure) -> bool`` hears of a member of
    a mesh this actor spawned that died (true: handled; false or raising: this
    actor dies of it, and its own owner hears); ``__cleanup__(self, exc)``
    runs when the actor stops (exc None) or dies (exc what killed it), after
    the meshes it spawned have stopped. See docs/supervision.md."""


class endpoint:  # noqa: N801 - Monarch's name
    """Marks an actor method (plain or ``async def``) as callable from other
    actors and the controller, through the adverbs of an ActorMesh. Bare
    (``@endpoint``) or with options:

    ``@endpoint(explicit_response_port=True)``: the method gets a
    :class:`Port` as its first argument (after self) and replies with
    ``port.send(value)``, or ``port.exception(error)`` (the caller's get()
    raises ActorError), now or later, from another endpoint or a thread; what
    it returns is ignored. The adverbs (call, call_one, choose, stream) give
    what is sent to the port; a broadcast's port drops values and raises an
    exception sent to it. An exception escaping such a method kills the actor
    (Monarch's rule): its caller gets SupervisionError."""

    def __new__(cls, fn: Optional[Callable] = None, /, *, explicit_response_port: bool = False):
        if fn is None:  # @endpoint(...): the options first, then the method
            return functools.partial(cls, explicit_response_port=explicit_response_port)
        return super().__new__(cls)

    def __getnewargs__(self):
        # A class pickled by value (cloudpickle) carries its endpoints: __new__
        # gets the method back, not the options-first form.
        return (self.fn,)

    def __init__(self, fn: Callable, /, *, explicit_response_port: bool = False):
        if isinstance(fn, endpoint):
            raise TypeError(f"{fn.name} is an endpoint already")
        if not callable(fn):
            raise TypeError(f"@endpoint marks a method, not {fn!r}")
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.explicit_response_port = bool(explicit_response_port)
        self.concurrent: Optional[int] = None  # concurrent_endpoint's bound
        self.is_async = inspect.iscoroutinefunction(fn)

    @property
    def ported(self) -> bool:
        """Whether the caller waits on a port for its reply, not on the call."""
        return self.explicit_response_port or self.concurrent is not None

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return self.fn.__get__(instance, owner)  # inside the actor: a plain method


DEFAULT_MAX_CONCURRENCY = 16


def concurrent_endpoint(fn: Optional[Callable] = None, /, *,
                        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                        explicit_response_port: bool = False):
    """An ``async def`` endpoint whose calls run beside each other and beside
    the actor's next messages (Monarch's ``concurrent_endpoint``): each call's
    body runs as an asyncio task on the actor's own loop thread, and the
    actor takes its next message once the body has run to its first await
    (so that message sees what the body did before it). At most
    ``max_concurrency`` calls of this endpoint run at once per actor (16 by
    default); the next one waits for a slot (backpressure, not an error),
    without holding up the actor's other messages, and slots go in arrival
    order. The caller's adverbs work as for any endpoint: what the body
    returns is the reply, an exception it raises reaches the caller as
    ActorError and the actor lives on. With ``explicit_response_port=True``
    the body gets the Port first and replies through it, and an exception
    escaping it kills the actor. Tasks still running when the actor stops are
    cancelled. An actor's ordinary async endpoints still run one at a time."""
    if fn is None:
        return functools.partial(concurrent_endpoint, max_concurrency=max_concurrency,
                                 explicit_response_port=explicit_response_port)
    if isinstance(fn, endpoint):
        raise ValueError("concurrent_endpoint does not wrap @endpoint; pass endpoint options "
                         "to @concurrent_endpoint")
    if not inspect.iscoroutinefunction(fn):
        raise ValueError(f"concurrent_endpoint can only wrap async endpoints (async def), not "
                         f"{getattr(fn, '__qualname__', fn)!r}")
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) \
            or max_concurrency < 1:
        raise ValueError(f"concurrent_endpoint(max_concurrency={max_concurrency!r}): the bound "
                         f"must be an int of at least 1")
    marked = endpoint(fn, explicit_response_port=explicit_response_port)
    marked.concurrent = max_concurrency
    return marked


class MixedEndpointsError(TypeError, ValueError):
    """An actor class has both sync and async endpoints: refused at spawn, as
    Monarch refuses it (with ValueError; this is both a TypeError and a
    ValueError)."""


_endpoint_kinds_checked: "weakref.WeakSet[type]" = weakref.WeakSet()


def _check_endpoint_kinds(cls: type) -> None:
    """Monarch's rule, at spawn, before anything is sent: an actor's
    endpoints are all sync or all async (a sync endpoint that blocks would
    stall the async ones sharing its actor's loop)."""
    if cls in _endpoint_kinds_checked:
        return
    sync, asynchronous = [], []
    for name in dir(cls):
        found = inspect.getattr_static(cls, name, None)
        if isinstance(found, endpoint):
            (asynchronous if found.is_async else sync).append(name)
    if sync and asynchronous:
        raise MixedEndpointsError(
            f"{cls.__qualname__} mixes sync and async endpoints (sync: {sync}, async: "
            f"{asynchronous}); as in Monarch, an actor's endpoints must be all sync or all "
            f"async, since a sync endpoint that blocks would stall the async ones: make them "
            f"all async def, or split the actor in two")
    # Its __cleanup__ runs where its endpoints do (Monarch checks the same).
    cleanup = inspect.getattr_static(cls, "__cleanup__", None)
    if cleanup is not None:
        async_cleanup = inspect.iscoroutinefunction(cleanup)
        if sync and async_cleanup:
            raise MixedEndpointsError(
                f"{cls.__qualname__} has sync endpoints ({sync}) but an async __cleanup__; as in "
                f"Monarch, make __cleanup__ a plain def too")
        if asynchronous and not async_cleanup:
            raise MixedEndpointsError(
                f"{cls.__qualname__} has async endpoints ({asynchronous}) but a plain "
                f"__cleanup__; as in Monarch, make __cleanup__ an async def too")
    _endpoint_kinds_checked.add(cls)


def _outcome(payload: bytes, rank: int, actor: str):
    tag, body = payload[:1], payload[1:]
    if tag == _runtime.VALUE:
        return _pickle.loads(body)
    original, remote_type, message, text = _pickle.loads(body)
    exception = None
    if original is not None:
        try:
            exception = _pickle.loads(original)
        except Exception:  # the class may not exist here
            exception = None
    error = ActorError(f"rank {rank}, actor '{actor}' raised {remote_type}: {message}\n"
                       f"remote traceback:\n{text}",
                       rank=rank, actor=actor, remote_type=remote_type, traceback=text,
                       exception=exception)
    error.__cause__ = exception
    return error


def _supervision_error(message: str, rank: int, host: str, actor: str, endpoint: str,
                       cause: Optional[str] = None):
    """A SupervisionError that says which call failed, where and why:
    ``.rank``, ``.host``, ``.actor`` (the mesh's name), ``.endpoint``, and
    ``.cause`` when the actor died (its traceback)."""
    exc = SupervisionError(f"call to {actor}.{endpoint}() failed: {message}")
    exc.rank, exc.host, exc.actor, exc.endpoint, exc.cause = rank, host, actor, endpoint, cause
    return exc


def _entry_error(error: tuple, actor: str, endpoint: str, member: int):
    """A failed member's error. ``rank`` is the member's (``member``) even
    when the process lost was a cast hop on its way (named in the message,
    and as ``lost_rank``)."""
    kind, message, rank, host, cause = error
    if kind in ("lost", "failed"):
        exc = _supervision_error(message, rank, host, actor, endpoint,
                                 cause if kind == "failed" else None)
        exc.lost_rank = rank if kind == "lost" else None
        exc.rank = member
        return exc
    if kind == "stopped":
        return ActorStoppedError(message, rank=rank, actor=actor, remote_type=kind)
    return ActorError(message, rank=rank, actor=actor, remote_type=kind)


class Future(Generic[R]):
    """A result to come: ``get(timeout=None)``, or ``await future``. A get
    that times out (TimeoutError) leaves it pending: get again later."""

    _mesh: Optional["Future"] = None  # call()'s: the ValueMesh with errors in place

    def __init__(self, wait: Callable[[Optional[float]], Any]):
        self._wait = wait
        self._lock = threading.Lock()
        self._done = False
        self._value = None
        self._error = None

    def get(self, timeout: Optional[float] = None) -> R:
        with self._lock:
            if not self._done:
                try:
                    self._value = self._wait(timeout)
                except TimeoutError:
                    raise
                except BaseException as e:  # noqa: BLE001 - kept, raised on every get
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value

    result = get

    def value_mesh(self, timeout: Optional[float] = None) -> "ValueMesh":
        """call()'s replies with each failed member's error in its place
        (ValueMesh.errors()), where get() raises the first failure."""
        if self._mesh is None:
            raise TypeError("value_mesh() is for the Future of an endpoint's call(); this "
                            "Future holds a single result")
        return self._mesh.get(timeout)

    def __await__(self):
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.get).__await__()


def _first_failure(mesh: "ValueMesh", failed: List[Tuple[int, BaseException]]) -> BaseException:
    """What call().get() raises: the first failed member's error (row-major),
    the first lost one's when a process is gone (SupervisionError), as a copy
    whose message says how many others failed, with ``value_mesh`` attached."""
    lost = [f for f in failed if isinstance(f[1], SupervisionError)]
    rank, error = (lost or failed)[0]
    others = [r for r, _ in failed if r != rank]
    if not others:
        note = "(the only member of the mesh that failed)"
    else:
        shown = ", ".join(map(str, others[:8])) + (", ..." if len(others) > 8 else "")
        note = (f"({len(others)} other member{'s' if len(others) > 1 else ''} of the mesh "
                f"failed too: rank{'s' if len(others) > 1 else ''} {shown}; the error's "
                f"value_mesh holds every member's outcome)")
    head, newline, rest = str(error).partition("\n")
    try:
        raised = type(error)(f"{head} {note}{newline}{rest}")
        raised.__dict__.update(error.__dict__)  # rank, actor, traceback, exception, host
        raised.__cause__ = error.__cause__
    except Exception:  # an error type that takes other arguments: raised as it is
        raised = error
    raised.value_mesh = mesh
    return raised


def _all_succeeded(mesh: "ValueMesh") -> "ValueMesh":
    failed = mesh.errors()
    if failed:
        raise _first_failure(mesh, failed)
    return mesh


class Point(dict):
    """A rank's coordinates in its mesh (a dict label -> index) and its rank.
    ``str()`` reads as Monarch's: ``{'hosts': 0/1, 'gpus': 1/2}`` (index/size)."""

    def __init__(self, rank: int, shape: Shape):
        super().__init__(shape.coordinates(rank))
        self.rank = rank
        self.shape = shape

    def size(self, label: str) -> int:
        """The size of dimension label."""
        return self.shape.size(label)

    def __str__(self):
        sizes = dict(self.shape.sizes)
        return "{" + ", ".join(f"'{label}': {index}/{sizes[label]}"
                               for label, index in self.items()) + "}"

    def __repr__(self):
        return f"Point(rank={self.rank}, {dict(self)})"


class _Sliceable:
    _shape: Shape

    def _with(self, shape: Shape):
        raise NotImplementedError

    @property
    def sizes(self) -> Dict[str, int]:
        return dict(self._shape.sizes)

    def size(self, dim: Optional[str] = None) -> int:
        return len(self._shape) if dim is None else self._shape.size(dim)

    def __len__(self):
        return len(self._shape)

    @property
    def shape(self) -> Shape:
        return self._shape

    def survivors(self):
        """The same over its live ranks only (those whose process is not
        lost), so a program carries on after a loss: itself when none is
        lost, else one dimension ``ranks`` over the live ranks in rank order
        (no stride describes what is left). Raises SupervisionError when
        every rank is lost."""
        ranks = self._shape.ranks()
        live = sorted(rank for rank in ranks if _crown.alive(rank))
        if len(live) == len(ranks):
            return self
        if not live:
            raise SupervisionError(f"every rank of {self._shape} has been lost")
        return self._with(Shape.of_ranks("ranks", live))

    def slice(self, **dims):
        """``slice(procs=0)`` removes a dimension, ``slice(procs=slice(0, 4, 2))`` keeps it."""
        return self._with(self._shape.select(dims))

    def flatten(self, name: str):
        return self._with(self._shape.flatten(name))

    def rename(self, **names):
        shape = self._shape
        for old, new in names.items():
            shape = shape.rename(old, new)
        return self._with(shape)

    def split(self, **dims):
        """``split(procs=(("a", 2), ("b", 2)))``: one dimension becomes several."""
        shape = self._shape
        for label, parts in dims.items():
            shape = shape.split(label, list(parts))
        return self._with(shape)


class ValueMesh(_Sliceable, Generic[R]):
    """Replies of a mesh call, one per actor, by coordinates. Slices like a
    mesh (``slice``, ``flatten``, ``rename``, ``split``); iterating it yields
    ``(point, value)``, as ``items()`` does."""

    def __init__(self, shape: Shape, entries: List[Tuple[int, Any, Optional[BaseException]]]):
        self._shape = shape
        self._entries = entries  # (rank, value, error) in row-major order

    def _with(self, shape):
        by_rank = {entry[0]: entry for entry in self._entries}
        return ValueMesh(shape, [by_rank[rank] for rank in shape.ranks()])

    def item(self, **coords) -> R:
        """The value at coords (one index per dimension; none needed for a
        mesh of one); raises its error."""
        if not coords and len(self._entries) == 1:
            index = 0
        else:
            index = self._shape.index_of(self._shape.rank(coords))
        rank, value, error = self._entries[index]
        if error is not None:
            raise error
        return value

    def items(self) -> Iterator[Tuple[Point, R]]:
        """(point, value) for every actor; raises at the first failed one."""
        for rank, value, error in self._entries:
            if error is not None:
                raise error
            yield Point(rank, self._shape), value

    __iter__ = items

    def values(self) -> List[R]:
        return [value for _, value in self.items()]

    def errors(self) -> List[Tuple[int, BaseException]]:
        """(rank, error) of each member that failed, in row-major order."""
        return [(rank, error) for rank, _, error in self._entries if error is not None]

    def __repr__(self):
        shown = [repr(e if e is not None else v) for _, v, e in self._entries]
        return f"ValueMesh({self._shape}, [{', '.join(shown)}])"


_spawning = threading.local()  # .name: the mesh whose actor this thread constructs


def _construct(name: str, cls: type, /, *args, **kwargs):
    # The spawn payload's "class": crown._runtime.construct calls it on every
    # rank. It keeps the mesh's name on the instance for current_actor_name(),
    # which also works while cls.__init__ runs.
    outer = getattr(_spawning, "name", None)
    _spawning.name = name
    try:
        instance = cls(*args, **kwargs)
    finally:
        _spawning.name = outer
    instance.__dict__["_crown_actor_name"] = name
    return instance


def _type_name(value) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _unpicklable(error: TypeError, what: str, args, kwargs, more=()) -> TypeError:
    """After pickling a call failed (error): a TypeError naming the first
    argument that does not pickle by itself, with its type. Only on failure:
    the call pickles once when it can."""
    suspects = itertools.chain(
        ((f"positional argument {i}", value) for i, value in enumerate(args)),
        ((f"keyword argument {key!r}", value) for key, value in kwargs.items()), more)
    for where, value in suspects:
        try:
            _pickle.dumps(value)
        except TypeError as failure:
            reason = failure.__cause__ if failure.__cause__ is not None else failure
            return TypeError(f"{what}: {where} ({_type_name(value)}) cannot be pickled, so it "
                             f"cannot be sent: {reason}")
    return error


class ProcMesh(_Sliceable):
    """Processes (ranks) with named dimensions."""

    def __init__(self, shape: Shape, stopped: Optional[List[bool]] = None):
        self._shape = shape
        self._stopped = stopped if stopped is not None else [False]  # shared with its slices

    def _with(self, shape):
        return ProcMesh(shape, self._stopped)

    def stacks(self, native: bool = False, timeout: float = 5.0):
        """The stacks of every thread of every process of this mesh, asked of
        all at once: a ``crown._stacks.Stacks``, whose str() merges the
        threads alike across ranks ("ranks 0-3,5: ...") so the odd one out
        stands out, and whose ``by_rank`` holds each rank's own. Python's come
        from faulthandler's signal-safe dump, so a rank spinning in C with the
        GIL held answers too; ``native=True`` adds eu-stack's (elfutils) native
        frames. A rank that is lost or silent past `timeout` says why."""
        from . import _stacks

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
        lost = [rank for rank in self._shape.ranks() if not _crown.alive(rank)]
        if not lost:
            return self
        made = _crown.respawn(lost)
        return self._with(self._shape.replacing(dict(zip(lost, made))))

    def stop(self) -> Future:
        """Stops every actor mesh that this owner (the controller, or the actor
        whose endpoint runs this) spawned on these procs, each as
        ActorMesh.stop does, and spawns on this ProcMesh (and its slices) fail
        from then on. The processes themselves live on: the launcher started
        them, and they serve other meshes until the job ends. Returns a done
        Future (``await procs.stop()`` works)."""
        actor = _runtime.current_actor()
        _supervision.stop_owned(actor[1] if actor is not None else None,
                                set(self._shape.ranks()))
        self._stopped[0] = True
        return Future(lambda timeout: None)

    def spawn(self, name: str, cls: type, *args, **kwargs) -> "ActorMesh":
        """One ``cls(*args, **kwargs)`` on every proc. Returns at once, as in
        Monarch: the members are constructed meanwhile, and the mesh's first
        use (an endpoint looked up, stop, sending the mesh elsewhere) waits
        for them. A constructor that raises is a supervision failure of that
        member, delivered to the owner (the spawning actor's
        ``__supervise__``, or the controller's ``unhandled_fault_hook``);
        calls to that member raise SupervisionError with the original
        traceback. Wrong use (not an Actor subclass, arguments that cannot be
        pickled, a stopped ProcMesh) raises here, before anything is sent."""
        if not (isinstance(cls, type) and issubclass(cls, Actor)):
            raise TypeError(f"spawn needs an Actor subclass, not {cls!r}")
        if self._stopped[0]:
            raise RuntimeError(f"cannot spawn '{name}': this ProcMesh ({self._shape}) was "
                               f"stopped (ProcMesh.stop)")
        _check_endpoint_kinds(cls)  # MixedEndpointsError, before anything is sent
        try:
            payload = _pickle.dumps((_construct, (name, cls, *args), kwargs))
        except TypeError as e:
            raise _unpicklable(e, f"spawn({name!r}, {cls.__qualname__})", args, kwargs,
                               (("the actor class", cls),)) from None
        with _supervision.spawning():
            local, pending = _crown.spawn_start(self._shape, name, payload)
            spawning = _Spawning(pending, name)
            _supervision.spawned(local, self._shape, cls, name, spawning)
        return ActorMesh(self._shape, local, cls, name, spawning)

    def activate(self):
        """``with procs.activate():`` records torch code on these procs
        (crown.tensor): factories make a shard on every proc, ops on them run
        there, and results stay there until fetched (crown.fetch_shard,
        crown.inspect). The first use spawns a tensor engine on every proc."""
        return self.tensors().activate()

    def tensors(self):
        """The crown.tensor.Mesh of these procs (for mesh.rank(dims), flush())."""
        from .tensor._engine import mesh_of

        return mesh_of(self._shape)

    def __repr__(self):
        return f"ProcMesh({self._shape})"


class _Spawning:
    """A spawn under way (ProcMesh.spawn returned at once): wait() returns once
    every member's constructor has run, or failed (which the owner hears of
    through supervision, and calls to that member then say)."""

    SAY_EVERY_S = 30.0  # a constructor still running this long is said to be

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
                    _crown.log("warn", f"actor mesh {self._name!r}: a member's __init__ is still "
                                       f"running after {waited:.0f} s; the first use of the mesh "
                                       f"waits until every member is constructed")
                self._pending.get()
                self._done = True
                self._pending = None


class ActorMesh(_Sliceable, Generic[R]):
    """One actor per proc of a mesh; its endpoints are attributes with adverbs."""

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
        ``await mesh.stop()`` read as in Monarch."""
        self._ready()
        finishing = _crown.cast_call(self._shape, self._local,
                                     _pickle.dumps((_runtime.STOP, (), {})))
        finishing.get()  # a member that is gone already has nothing left to finish
        _crown.stop_mesh(self._shape, self._local)
        if self._shape.ranks() == self._spawned_ranks():
            _supervision.forget(self._local)
        return Future(lambda timeout: None)

    def _spawned_ranks(self):
        owned = _supervision.owned(self._local)
        return owned.shape.ranks() if owned is not None else None

    def __reduce__(self):
        self._ready()  # whoever receives it may send to the members at once
        return (ActorMesh, (self._shape, self._local, self._cls, self._name))

    def __repr__(self):
        return f"ActorMesh({self._name!r}, {self._cls.__name__}, {self._shape})"


class EndpointRef:
    """An endpoint of every actor of a mesh, called through an adverb."""

    def __init__(self, mesh: ActorMesh, name: str):
        self._mesh = mesh
        self._name = name
        self._only_rank = None  # call_one's rank, once checked
        found = inspect.getattr_static(mesh._cls, name, None)
        # Its reply comes through a port (explicit_response_port, concurrent_endpoint).
        self._ported = isinstance(found, endpoint) and found.ported

    def __call__(self, *args, **kwargs):
        raise TypeError(f"call an endpoint through an adverb: {self._name}.call(...), "
                        f".call_one(...), .choose(...), .stream(...) or .broadcast(...)")

    def _payload(self, args, kwargs, adverb: str) -> bytes:
        if self._ported and adverb == "accumulate":
            raise TypeError(f"{self._name} replies through a port (explicit_response_port or "
                            f"concurrent_endpoint): an Accumulator cannot fold its replies; "
                            f"use call()")
        try:
            return _pickle.dumps((self._name, args, kwargs))  # TypeError before anything is sent
        except TypeError as e:
            raise _unpicklable(e, f"{self._name}.{adverb}()", args, kwargs) from None

    def _parts(self, args, kwargs, adverb: str):
        try:
            return _pickle.dumps_parts((self._name, args, kwargs))  # as _payload, in two parts
        except TypeError as e:
            raise _unpicklable(e, f"{self._name}.{adverb}()", args, kwargs) from None

    def _entries(self, raw) -> List[Tuple[int, Any, Optional[BaseException]]]:
        entries = []
        for rank, payload, error in raw:
            if error is not None:
                entries.append((rank, None, _entry_error(error, self._mesh._name, self._name,
                                                         rank)))
                continue
            value = _outcome(payload, rank, self._mesh._name)
            if isinstance(value, ActorError):
                entries.append((rank, None, value))
            else:
                entries.append((rank, value, None))
        return entries

    def call(self, *args, **kwargs) -> Future["ValueMesh"]:
        """Every actor's reply, as a Future of a ValueMesh. Its get() raises
        when a member failed, as Monarch's does: the first failed member's
        error in row-major order (ActorError when it raised, SupervisionError,
        preferred, when its process is gone), saying how many others failed,
        with the whole ValueMesh as its ``value_mesh``. ``value_mesh()`` on the
        Future gives that ValueMesh without raising."""
        mesh = self._mesh
        if self._ported:
            replies = _PortedReplies(self, mesh._shape.ranks())
            with _sent.collecting() as sent:
                payload = replies.payload(args, kwargs, "call")
            replies.watch_stream(_crown.cast_stream(mesh._shape, mesh._local, payload))
            _hold_until_handled(sent, mesh)
            every = Future(lambda timeout: ValueMesh(mesh._shape, replies.entries(timeout)))
            future = Future(lambda timeout: _all_succeeded(every.get(timeout)))
            future._mesh = every
            return future
        with _sent.collecting() as sent:
            payload = self._payload(args, kwargs, "call")
        pending = _crown.cast_call(mesh._shape, mesh._local, payload)
        _sent.hold(sent, pending.done)
        replies = Future(lambda timeout:
                         ValueMesh(mesh._shape, self._entries(pending.get(timeout))))
        future = Future(lambda timeout: _all_succeeded(replies.get(timeout)))
        future._mesh = replies
        return future

    def _ported_direct(self, rank: int, args, kwargs, adverb: str) -> Future:
        replies = _PortedReplies(self, [rank])
        with _sent.collecting() as sent:
            parts = replies.payload(args, kwargs, adverb, parts=True)
        pending = _crown.request(rank, self._mesh._local, *parts)
        _sent.hold(sent, pending.done)  # done when the endpoint returns: it has read them
        replies.watch_request(rank, pending)
        return Future(lambda timeout: replies.one(rank, timeout))

    def _direct(self, rank: int, args, kwargs, adverb: str) -> Future:
        with _sent.collecting() as sent:
            parts = self._parts(args, kwargs, adverb)
        pending = _crown.request(rank, self._mesh._local, *parts)
        _sent.hold(sent, pending.done)

        def wait(timeout):
            try:
                payload = pending.get(timeout)
            except _crown.ActorStoppedError as e:
                if isinstance(e, ActorStoppedError):
                    raise
                raise ActorStoppedError(str(e), rank=rank, actor=self._mesh._name,
                                        remote_type="stopped") from None
            except SupervisionError as e:
                raise _supervision_error(str(e), rank, getattr(e, "host", ""), self._mesh._name,
                                         self._name, getattr(e, "cause", None)) from None
            value = _outcome(payload, rank, self._mesh._name)
            if isinstance(value, ActorError):
                raise value
            return value

        return Future(wait)

    def call_one(self, *args, **kwargs) -> Future:
        """The reply of the mesh's only actor (raises ValueError first if it has more)."""
        if self._only_rank is None:
            shape = self._mesh._shape
            if len(shape) != 1:
                raise ValueError(f"call_one needs a mesh of exactly one actor; this one is "
                                 f"{shape} ({len(shape)} actors): slice it first, e.g. "
                                 f".slice({shape.labels[0]}=0), or use call()")
            self._only_rank = shape.ranks()[0]
        if self._ported:
            return self._ported_direct(self._only_rank, args, kwargs, "call_one")
        return self._direct(self._only_rank, args, kwargs, "call_one")

    def choose(self, *args, **kwargs) -> Future:
        """One actor's reply, spreading calls over the live actors."""
        if self._ported:
            return self._ported_direct(_crown.choose_rank(self._mesh._shape), args, kwargs,
                                       "choose")
        return self._direct(_crown.choose_rank(self._mesh._shape), args, kwargs, "choose")

    def stream(self, *args, **kwargs) -> Iterator[Future]:
        """Casts now and yields one Future per actor (Monarch's
        Iterator[Future]): the k-th future's get() gives the k-th reply to
        arrive, or raises that member's error; ``get(timeout)`` raises
        TimeoutError when it has not come, and can be tried again."""
        mesh = self._mesh
        if self._ported:
            replies = _PortedReplies(self, mesh._shape.ranks())
            with _sent.collecting() as sent:
                payload = replies.payload(args, kwargs, "stream")
            replies.watch_stream(_crown.cast_stream(mesh._shape, mesh._local, payload))
            _hold_until_handled(sent, mesh)
            return (Future(functools.partial(replies.take, k)) for k in range(len(mesh._shape)))
        with _sent.collecting() as sent:
            payload = self._payload(args, kwargs, "stream")
        pending = _crown.cast_stream(mesh._shape, mesh._local, payload)
        _hold_until_handled(sent, mesh)
        arrivals = _Arrivals(self, pending)
        return (Future(functools.partial(arrivals.take, k)) for k in range(len(mesh._shape)))

    def rref(self, *args, **kwargs):
        """Calls the endpoint on every actor and keeps what each returns (a
        torch tensor) on its own rank, as one mesh tensor whose shard on each
        rank is that actor's result (crown.tensor): use it in the actors'
        ProcMesh's activate(). Waits for every actor; raises what one raised,
        and ValueError when their tensors differ in shape or dtype."""
        from .tensor._engine import rref

        if self._ported:
            raise TypeError(f"{self._name} replies through a port (explicit_response_port or "
                            f"concurrent_endpoint): rref() keeps what an endpoint returns")
        return rref(self._mesh._shape, self._mesh._local, self._name, args, kwargs,
                    lambda raw: self._entries(raw))

    def broadcast(self, *args, **kwargs) -> None:
        """Sends to every actor; no replies. A mesh tensor among the arguments
        lives until every actor has read its shard, however soon the caller
        lets go of it."""
        mesh = self._mesh
        with _sent.collecting() as sent:
            if self._ported:  # a port that drops values and raises an exception sent to it
                payload = _ported_payload(self, _DroppingPort(), args, kwargs, "broadcast")
            else:
                payload = self._payload(args, kwargs, "broadcast")
        _crown.cast_broadcast(mesh._shape, mesh._local, payload)
        _hold_until_handled(sent, mesh)


class _Arrivals:
    """A cast stream's replies in the order they arrive, read on demand by the
    futures of EndpointRef.stream: future k takes reply k, whichever future
    is waited on first."""

    def __init__(self, ref: EndpointRef, pending):
        self._ref, self._pending = ref, pending
        self._lock = threading.Lock()
        self._arrived: List[Any] = []

    def take(self, k: int, timeout: Optional[float]):
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"stream reply {k} did not arrive within {timeout} s")
        try:
            while len(self._arrived) <= k:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                item = self._pending.next(left)  # TimeoutError when nothing came in time
                if item is None:  # DLV-1 says every member answers: not expected
                    raise RuntimeError(f"the stream ended after {len(self._arrived)} replies, "
                                       f"before reply {k}")
                self._arrived.append(item)
            item, self._arrived[k] = self._arrived[k], None  # its Future keeps the outcome
        finally:
            self._lock.release()
        (_, value, error), = self._ref._entries([item])
        if error is not None:
            raise error
        return value


class Accumulator:
    """Calls an endpoint on every actor and folds the replies up the cast tree:
    ``Accumulator(counters.value, 0, operator.add).accumulate().get()``.

    Each hop of the tree folds the replies of its subtree with ``combine``
    (which travels pickled with the cast, by value when it must), so the
    caller receives one value, not one per actor. ``combine`` must be
    associative and commutative (replies fold in arrival order);
    ``identity`` is folded in once, on the caller: ``combine(identity,
    folded)``. An endpoint or a combine that raises fails the result with
    MeshError naming the ranks whose replies could not be folded, with the
    error and its traceback."""

    def __init__(self, endpoint_ref: EndpointRef, identity, combine: Callable[[Any, Any], Any]):
        self._endpoint, self._identity, self._combine = endpoint_ref, identity, combine
        self._key = _runtime.reducer_key(combine)  # TypeError here if combine cannot travel

    def accumulate(self, *args, **kwargs) -> Future:
        ref = self._endpoint
        mesh = ref._mesh
        with _sent.collecting() as sent:
            payload = ref._payload(args, kwargs, "accumulate")
        pending = _crown.cast_reduce(mesh._shape, mesh._local, payload, self._key)
        _sent.hold(sent, pending.done)

        def wait(timeout):
            outcome = pending.get(timeout)  # MeshError when a member or a fold failed
            return self._combine(self._identity, _pickle.loads(outcome[1:]))

        return Future(wait)


# Channels: a Port is a picklable address that actors send values to; its
# PortReceiver, on the process that opened the channel, receives them in
# order. One port actor per process (spawned by the first Channel.open there)
# routes every value by port id to its receiver's queue.
_receivers: Dict[int, "queue.Queue"] = {}  # port id -> the open receiver's queue
_next_port = itertools.count(1)
_port_lock = threading.Lock()
_port_actor: Optional[int] = None  # the port actor's local id, once spawned


class _PortActor(Actor):
    @endpoint
    def deliver(self, port_id: int, item, quiet: bool = False):
        receiver = _receivers.get(port_id)
        if receiver is None:
            # A warning, not a raise: a failure would count against the one
            # actor that serves every channel of this process. Quiet for a
            # reply port: what comes after the reply (or after the caller
            # gave up) is dropped, as a once-port's would be.
            if not quiet:
                _crown.log("warn", f"port {port_id} on rank {_crown.rank()} is closed: dropped "
                                   f"a {type(item).__name__} sent to it")
            return
        receiver.put(item)


def _port_actor_id() -> int:
    global _port_actor
    with _port_lock:
        if _port_actor is None:
            with _supervision.system_spawn():  # it serves every channel of this process
                ports = this_proc().spawn("crown-ports", _PortActor)
                ports._ready()  # Port.send goes to it directly
                _port_actor = ports._local
        return _port_actor


def open_ports() -> int:
    """How many PortReceivers this process holds open (for tests and leak hunts)."""
    return len(_receivers)


class _Failed:
    """An exception sent to a port (Port.exception): where it was sent from
    and the exception as a caller reads it (_runtime.raised_body)."""

    def __init__(self, rank: int, body: bytes):
        self.rank, self.body = rank, body

    def error(self, actor: str) -> "ActorError":
        return _outcome(_runtime.RAISED + self.body, self.rank, actor)


class _Died:
    """Sent to a reply port by an actor dying of a concurrent task's failure:
    its caller asks at once whether the member lives (it does not)."""


class Port(Generic[R]):
    """Where a channel's values go: ``port.send(value)`` from any actor or the
    controller; ``port.exception(error)`` makes the receiver's get() raise it.
    Picklable, so it travels inside messages."""

    _quiet = False  # whether a value for a closed port is dropped without a warning

    def __init__(self, rank: int, local: int, port_id: int):
        self._rank, self._local, self._port_id = rank, local, port_id

    def _item(self, item):
        return item

    def _post(self, item, what: str) -> None:
        try:
            parts = _pickle.dumps_parts(("deliver", (self._port_id, self._item(item),
                                                     self._quiet), {}))
        except TypeError as e:
            raise _unpicklable(e, what, (item,), {}) from None
        _crown.send(self._rank, self._local, *parts)

    def send(self, value) -> None:
        """One-way: nothing waits; a value for a closed port is dropped (and
        logged on the receiver's rank)."""
        self._post(value, "Port.send()")

    def exception(self, error: BaseException) -> None:
        """Sends an exception instead of a value (Monarch's Port.exception):
        the receiver's get() raises it (a plain channel's receiver raises the
        exception itself when it unpickles there, else an ActorError with its
        text); an endpoint's caller gets ActorError, the exception as its
        ``__cause__``, with the traceback where it was raised."""
        if not isinstance(error, BaseException):
            raise TypeError(f"Port.exception() takes an exception, not {type(error).__name__}")
        self._post(_Failed(_crown.rank(), _runtime.raised_body(error)), "Port.exception()")

    def __reduce__(self):
        return (Port, (self._rank, self._local, self._port_id))


class _ReplyPort(Port):
    """The port a ported endpoint's caller waits on (_PortedReplies). Each
    value goes with the member that sends it (the rank where the port first
    arrived), since a cast's members all get the same port."""

    _quiet = True

    def __init__(self, rank: int, local: int, port_id: int, member: Optional[int] = None):
        super().__init__(rank, local, port_id)
        self._member = member

    def _item(self, item):
        return (self._member, item)

    def _died(self) -> None:
        self._post(_Died(), "Port.send()")

    def __reduce__(self):
        return (_reply_port, (self._rank, self._local, self._port_id, self._member))


def _reply_port(rank: int, local: int, port_id: int, member: Optional[int]) -> _ReplyPort:
    return _ReplyPort(rank, local, port_id, _crown.rank() if member is None else member)


class _DroppingPort(Port):
    """A broadcast's port (Monarch's DroppingPort): nobody waits, so values
    are dropped, and an exception sent to it is raised where it is sent, so
    that it kills the actor as any failed one-way call does."""

    def __init__(self):
        super().__init__(-1, 0, 0)

    def send(self, value) -> None:
        pass

    def exception(self, error: BaseException) -> None:
        raise error

    def __reduce__(self):
        return (_DroppingPort, ())


def _hold_until_handled(sent: List[Any], mesh) -> None:
    """Keeps the mesh tensors of a message with no reply of its own (sent)
    until every actor of mesh has handled it: a probe cast after it answers
    once each actor has handled what came before (ORD-1)."""
    if sent:
        probe = _crown.cast_call(mesh._shape, mesh._local,
                                 _pickle.dumps((_runtime.PROBE, (), {})))
        _sent.hold(sent, probe.done)


def _ported_payload(ref: "EndpointRef", port: Port, args, kwargs, adverb: str,
                    parts: bool = False):
    """A ported endpoint's call: the port goes first, before the caller's arguments."""
    try:
        if parts:
            return _pickle.dumps_parts((ref._name, (port, *args), kwargs))
        return _pickle.dumps((ref._name, (port, *args), kwargs))
    except TypeError as e:
        raise _unpicklable(e, f"{ref._name}.{adverb}()", args, kwargs) from None


REPLY_POLL_S = 0.05  # how often a caller waiting on a reply port looks at its members
PROBE_INTERVAL_S = 1.0  # how often it asks a member that returned without replying


class _PortedReplies:
    """The replies of one call to a ported endpoint (explicit_response_port,
    concurrent_endpoint): each member's first value or exception sent to the
    call's reply port, in arrival order.

    DLV-1: a member that dies, or whose process is lost, before it replies
    does not leave its caller waiting. The call travels as a request (a
    cast's members each answer), whose completion fails when the member dies
    or its process is lost while the endpoint runs; once the endpoint has
    returned without replying (it replies later, from elsewhere), the caller
    asks the member, with a probe request, every PROBE_INTERVAL_S, at once
    when ``_crown.alive(rank)`` says its process is gone, and at once when
    the member says it dies (_Died): a dead member refuses the probe with
    SupervisionError naming the cause, a stopped one with
    ActorStoppedError, a lost process with SupervisionError, and that is the
    member's outcome. A member that lives and never replies is waited for
    (get(timeout) bounds the wait)."""

    def __init__(self, ref: "EndpointRef", ranks: List[int]):
        self._ref = ref
        self._actor = ref._mesh._name
        self._queue: "queue.Queue" = queue.Queue()
        local = _port_actor_id()
        port_id = next(_next_port)
        _receivers[port_id] = self._queue
        self._close = weakref.finalize(self, _receivers.pop, port_id, None)
        self._close.atexit = False
        self.port = _ReplyPort(_crown.rank(), local, port_id)
        self._ranks = list(ranks)
        self._open = set(ranks)  # members with no outcome yet
        self._outcomes: Dict[int, Tuple[Any, Optional[BaseException]]] = {}
        self._arrivals: List[int] = []  # members in the order their outcomes came
        self._requests: Dict[int, Any] = {}  # member -> the call's RequestFuture
        self._stream = None  # a cast's CastStream, until every member has answered
        self._returned: Dict[int, float] = {}  # member -> when to probe it next
        self._probes: Dict[int, Any] = {}  # member -> a probe's RequestFuture
        self._lock = threading.Lock()

    def payload(self, args, kwargs, adverb: str, parts: bool = False):
        return _ported_payload(self._ref, self.port, args, kwargs, adverb, parts)

    def watch_request(self, rank: int, pending) -> None:
        self._requests[rank] = pending

    def watch_stream(self, stream) -> None:
        self._stream = stream

    # The outcomes, each waiting as long as timeout allows (TimeoutError
    # leaves the call pending; get again later).
    def entries(self, timeout: Optional[float]):
        self._wait(lambda: not self._open, timeout, "every reply")
        return [(rank, *self._outcomes[rank]) for rank in self._ranks]

    def one(self, rank: int, timeout: Optional[float]):
        self._wait(lambda: not self._open, timeout, "the reply")
        value, error = self._outcomes[rank]
        if error is not None:
            raise error
        return value

    def take(self, k: int, timeout: Optional[float]):
        self._wait(lambda: len(self._arrivals) > k, timeout, f"stream reply {k}")
        value, error = self._outcomes[self._arrivals[k]]
        if error is not None:
            raise error
        return value

    def _wait(self, enough, timeout: Optional[float], what: str) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"{what} of {self._actor}.{self._ref._name} did not arrive "
                               f"within {timeout} s")
        try:
            while not enough():
                self._look()
                if enough():
                    break
                wait = REPLY_POLL_S
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"{what} of {self._actor}.{self._ref._name} did not "
                                           f"arrive within {timeout} s")
                    wait = min(wait, left)
                try:
                    item = self._queue.get(timeout=wait)
                except queue.Empty:
                    continue
                self._arrived(item)
                while True:  # what else came meanwhile, without waiting
                    try:
                        self._arrived(self._queue.get_nowait())
                    except queue.Empty:
                        break
        finally:
            self._lock.release()

    def _settle(self, rank: int, value, error: Optional[BaseException]) -> None:
        if rank not in self._open:
            return  # its first outcome counts; what comes later is dropped
        self._open.discard(rank)
        self._outcomes[rank] = (value, error)
        self._arrivals.append(rank)
        self._returned.pop(rank, None)
        self._probes.pop(rank, None)
        self._requests.pop(rank, None)
        if not self._open:
            self._close()  # later sends to the port are dropped, quietly
            self._stream = None

    def _arrived(self, item) -> None:
        member, payload = item
        if member not in self._open:
            return
        if isinstance(payload, _Died):
            self._returned[member] = 0.0  # ask now
        elif isinstance(payload, _Failed):
            self._settle(member, None, payload.error(self._actor))
        else:
            self._settle(member, payload, None)

    def _returned_without_reply(self, rank: int) -> None:
        if rank in self._open:
            self._returned.setdefault(rank, time.monotonic() + PROBE_INTERVAL_S)

    def _failed(self, rank: int, error: BaseException) -> None:
        if isinstance(error, _crown.ActorStoppedError) and not isinstance(error,
                                                                          ActorStoppedError):
            error = ActorStoppedError(str(error), rank=rank, actor=self._actor,
                                      remote_type="stopped")
        self._settle(rank, None, error)

    def _look(self) -> None:
        """Takes what the calls and the probes have to say, and probes the
        members that returned without replying when it is time."""
        for rank, pending in list(self._requests.items()):
            if pending.done():
                del self._requests[rank]
                try:
                    outcome = _outcome(pending.get(), rank, self._actor)
                except Exception as error:  # noqa: BLE001 - the member's outcome
                    self._failed(rank, error)
                    continue
                if isinstance(outcome, ActorError):
                    self._settle(rank, None, outcome)
                else:
                    self._returned_without_reply(rank)
        while self._stream is not None:
            try:
                item = self._stream.next(0)
            except TimeoutError:
                break
            if item is None:
                self._stream = None
                break
            (rank, _, error), = self._ref._entries([item])
            if error is not None:
                self._settle(rank, None, error)
            else:
                self._returned_without_reply(rank)
        now = time.monotonic()
        for rank, when in list(self._returned.items()):
            probe = self._probes.get(rank)
            if probe is not None:
                if probe.done():
                    del self._probes[rank]
                    try:
                        probe.get()
                        self._returned[rank] = now + PROBE_INTERVAL_S
                    except Exception as error:  # noqa: BLE001 - the member is gone
                        self._failed(rank, error)
                continue
            if now >= when or not _crown.alive(rank):
                self._probes[rank] = _crown.request(
                    rank, self._ref._mesh._local,
                    *_pickle.dumps_parts((_runtime.PROBE, (), {})))


class PortReceiver(Generic[R]):
    """The receiving end of a channel. Closing it, or dropping the last
    reference to it, closes the port."""

    def __init__(self, port_id: int):
        self._port_id = port_id
        self._queue: "queue.Queue" = queue.Queue()
        _receivers[port_id] = self._queue
        self._forget = weakref.finalize(self, _receivers.pop, port_id, None)
        self._forget.atexit = False

    def recv(self) -> Future[R]:
        """The next value sent to the port, as a Future (Monarch's):
        ``recv().get(timeout=5)`` raises TimeoutError when nothing came within
        5 s and can be tried again; ``await receiver.recv()`` also works."""
        return Future(self._take)

    def _take(self, timeout: Optional[float]):
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"nothing arrived at the port within {timeout} s") from None
        if isinstance(item, _Failed):  # Port.exception: raised here, as Monarch's is
            error = item.error("port")
            raise error.exception if error.exception is not None else error
        return item

    def close(self) -> None:
        """Later values sent to the port are dropped; those already here can still be read."""
        self._forget()


class Channel(Generic[R]):
    """Opens channels: ``port, receiver = Channel[int].open()`` (the type
    argument is for type checkers only)."""

    @staticmethod
    def open() -> Tuple[Port[R], PortReceiver[R]]:
        """A new (Port, PortReceiver) pair whose receiver lives in this process."""
        local = _port_actor_id()
        port_id = next(_next_port)
        return Port(_crown.rank(), local, port_id), PortReceiver(port_id)


def current_rank() -> Point:
    """This actor's point in its mesh (outside actors: this process's rank in the world)."""
    here = _runtime.here()  # also on an actor's loop thread
    if here is None:
        return Point(_crown.rank(), Shape([("ranks", _crown.size())]))
    return Point(*here)


def current_size() -> Dict[str, int]:
    """The sizes of this actor's mesh (outside actors: {"ranks": N})."""
    here = _runtime.here()  # also on an actor's loop thread
    return dict(here[1].sizes) if here else {"ranks": _crown.size()}


def current_actor_name() -> str:
    """The name of the actor this code runs in, as in Monarch a distinct
    string for each member of each mesh: the mesh's spawn name followed by
    the member's point, e.g. ``"counter{'hosts': 0/1, 'procs': 2/4}"``.
    Outside actors (the controller's main): ``"client"``, Monarch's name for
    the controller's own actor."""
    instance = _runtime.current_instance()
    if instance is not None:
        name = instance.__dict__.get("_crown_actor_name")
    else:
        name = getattr(_spawning, "name", None)  # in cls.__init__, from spawn
    if name is None:
        return "client"
    return f"{name}{current_rank()}"


class _Context:
    def __init__(self):
        self.actor_instance = _runtime.current_instance()
        self.rank = current_rank()
        self.host = _crown.host()


def context() -> _Context:
    """Where this code runs: ``actor_instance`` (None outside actors), ``rank`` (a Point), ``host``."""
    return _Context()


class HostMesh:
    """One host of the launch and the ranks the launch started on it.

    crown starts no process after the launch: mpirun (or srun, sbatch) started
    every process the job will have. So a HostMesh hands out ranks that exist
    already rather than spawning new ones: see procs()."""

    def __init__(self, shape: Shape):
        self._shape = shape  # {"procs": P}: this host's ranks of the launch

    @property
    def ranks(self) -> List[int]:
        """The ranks the launch started on this host."""
        return self._shape.ranks()

    def procs(self, per_host: Optional[Dict[str, int]] = None) -> ProcMesh:
        """The first ``prod(per_host.values())`` ranks of this host, in rank
        order, as a ProcMesh whose dimensions are per_host's, named and sized
        as given (``{"gpus": 4}`` gives ``{"gpus": 4}``); without per_host, one
        proc and no dimension (Monarch's default). Calling it twice gives the
        same ranks again, each able to host actors of its own. Raises
        ValueError when more procs are asked than the launch started here."""
        per_host = dict(per_host or {})
        for label, size in per_host.items():
            if not isinstance(label, str) or not isinstance(size, int) or size < 1:
                raise ValueError(f"per_host={per_host}: each entry must be a dimension name "
                                 f"and a size of at least 1, not {label!r}: {size!r}")
        wanted = math.prod(per_host.values())
        available = len(self._shape)
        if wanted > available:
            raise ValueError(f"spawn_procs(per_host={per_host}) asks for {wanted} procs, but "
                             f"this host has {available} ranks of the launch, and crown starts "
                             f"no processes after it: launch more (mpirun -n ...) or ask for "
                             f"fewer")
        if not per_host:
            return ProcMesh(self._shape.select({"procs": 0}))
        shape = self._shape.select({"procs": slice(0, wanted)})
        return ProcMesh(shape.split("procs", list(per_host.items())))

    def spawn_procs(self, per_host: Optional[Dict[str, int]] = None) -> ProcMesh:
        """Monarch's name for procs(): the same ranks, already running; no
        process is started."""
        return self.procs(per_host)

    def __repr__(self):
        return f"HostMesh(ranks={self.ranks})"


def this_host() -> HostMesh:
    """The host this code runs on, as in Monarch: the controller's in main(),
    an actor's own inside its endpoints."""
    world = _crown.world_shape()
    host = world.select({"hosts": world.coordinates(_crown.rank())["hosts"]})
    if _placement.controller == "dedicated" and host.ranks()[0] == 0:
        host = host.select({"procs": slice(1, host.size("procs"))})  # rank 0 only controls
    return HostMesh(host)


def this_proc() -> ProcMesh:
    """The ProcMesh of just the process this code runs on (no dimensions), as
    in Monarch: the controller's in main(), an actor's own inside its
    endpoints. ``this_proc().spawn(...)`` puts one actor there."""
    return ProcMesh(Shape([("ranks", _crown.size())]).select({"ranks": _crown.rank()}))
