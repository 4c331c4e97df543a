"""What an actor class is, and what its code can ask (crown.actor re-exports
each): Actor, the endpoint decorators, the errors a call raises and how a
reply's outcome becomes one, the construction of an actor on its rank, and
current_rank/current_size/current_actor_name/context."""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
import weakref
from typing import Callable, Dict, NamedTuple, Optional

from . import _actor_shim, _context, _crown, _pickle, _protocol
from ._values import Point


SupervisionError = _crown.SupervisionError
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
    (Monarch's rule): its caller gets SupervisionError.

    ``@endpoint(propagate=...)``: what ``rref()`` (crown.tensor) makes of its
    results, as ``@remote(propagate=...)``: a function of the endpoint's
    arguments (mesh tensors as fake tensors; without self) whose tensors say
    which of the endpoint's results become mesh tensors, in its pytree's
    shape (a tuple of two: two mesh tensors); ``"inspect"``: none (rref()
    returns None, whatever the endpoint returns). Without one (None or
    ``"cached"``), the endpoint returns one tensor."""

    def __new__(cls, fn: Optional[Callable] = None, /, *, explicit_response_port: bool = False,
                propagate=None):
        if fn is None:  # @endpoint(...): the options first, then the method
            return functools.partial(cls, explicit_response_port=explicit_response_port,
                                     propagate=propagate)
        return super().__new__(cls)

    def __getnewargs__(self):
        # A class pickled by value (cloudpickle) carries its endpoints: __new__
        # gets the method back, not the options-first form.
        return (self.fn,)

    def __init__(self, fn: Callable, /, *, explicit_response_port: bool = False,
                 propagate=None):
        if isinstance(fn, endpoint):
            raise TypeError(f"{fn.name} is an endpoint already")
        if not callable(fn):
            raise TypeError(f"@endpoint marks a method, not {fn!r}")
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.explicit_response_port = bool(explicit_response_port)
        self.propagate = _check_propagate(propagate, "endpoint")
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


PROPAGATE_MODES = ("cached", "inspect", "mocked")


def _check_propagate(propagate, what: str):
    """An endpoint's propagate (Monarch's Propagator): None, a function, or
    one of Monarch's modes; anything else is refused where it is given."""
    if propagate is None or callable(propagate) or propagate in PROPAGATE_MODES:
        return propagate
    raise ValueError(f"{what}(propagate={propagate!r}): pass a function of the endpoint's "
                     f"arguments that returns tensors shaped like its results, or one of "
                     f"{', '.join(map(repr, PROPAGATE_MODES))}")


DEFAULT_MAX_CONCURRENCY = 16


def concurrent_endpoint(fn: Optional[Callable] = None, /, *,
                        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                        explicit_response_port: bool = False, propagate=None):
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
                                 explicit_response_port=explicit_response_port,
                                 propagate=propagate)
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
    marked = endpoint(fn, explicit_response_port=explicit_response_port, propagate=propagate)
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
            f"{cls.__qualname__} mixes both async and sync endpoints (sync: {sync}, async: "
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


def _outcome(payload: bytes, rank: int, actor: str, endpoint: Optional[str] = None):
    """A reply as the caller reads it: the value, or the ActorError of what the
    endpoint raised, whose text leads with Monarch's sentence ("Actor call
    <mesh>.<endpoint> failed.") and goes on with crown's (rank, type, remote
    traceback)."""
    tag, body = payload[:1], payload[1:]
    if tag == _protocol.VALUE:
        return _pickle.loads(body)
    original, remote_type, message, text = _pickle.loads(body)
    exception = None
    if original is not None:
        try:
            exception = _pickle.loads(original)
        except Exception:  # the class may not exist here
            exception = None
    call = f"{actor}.{endpoint}" if endpoint else actor
    error = ActorError(f"Actor call {call} failed.\n"
                       f"rank {rank}, actor '{actor}' raised {remote_type}: {message}\n"
                       f"remote traceback:\n{text}",
                       rank=rank, actor=actor, remote_type=remote_type, traceback=text,
                       exception=exception)
    error.__cause__ = exception
    return error


def _supervision_error(message: str, rank: int, host: str, actor: str, endpoint: str,
                       cause: Optional[str] = None):
    """A SupervisionError that says which call failed, where and why:
    ``.rank``, ``.host``, ``.actor`` (the mesh's name), ``.endpoint``, and
    ``.cause`` when the actor died (its traceback). Its text leads with
    Monarch's sentences, which programs match on; crown's account follows."""
    exc = SupervisionError(f"Endpoint call {actor}.{endpoint}() failed, The actor {actor} and "
                           f"all its descendants have failed: {message}")
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


_spawning = threading.local()  # .name, .cls: the mesh whose actor this thread constructs


def _construct(name: str, cls: type, /, *args, **kwargs):
    # The spawn payload's "class": crown._runtime.construct calls it on every
    # rank. It keeps the mesh's name on the instance for current_actor_name(),
    # which also works while cls.__init__ runs.
    outer = getattr(_spawning, "name", None), getattr(_spawning, "cls", None)
    _spawning.name, _spawning.cls = name, cls
    try:
        instance = cls(*args, **kwargs)
    finally:
        _spawning.name, _spawning.cls = outer
    instance.__dict__["_crown_actor_name"] = name
    return instance


def _type_name(value) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _unpicklable(error: Exception, what: str, args, kwargs, more=()) -> Exception:
    """After pickling a call failed with `error`: that same exception, as
    Monarch raises it (its own type and message), with a note naming the
    first argument that does not pickle by itself and its type. Only on
    failure: the call pickles once when it can."""
    suspects = itertools.chain(
        ((f"positional argument {i}", value) for i, value in enumerate(args)),
        ((f"keyword argument {key!r}", value) for key, value in kwargs.items()), more)
    for where, value in suspects:
        try:
            _pickle.dumps(value)
        except Exception:  # noqa: BLE001 - pickling fails in many types
            error.add_note(f"{what}: {where} ({_type_name(value)}) cannot be pickled, so it "
                           f"cannot be sent")
            return error
    error.add_note(f"{what}: the call cannot be pickled, so it cannot be sent")
    return error


def current_rank() -> Point:
    """This actor's point in its mesh (outside actors: this process's rank in the world)."""
    here = _context.here()  # also on an actor's loop thread
    if here is None:
        return Point(_crown.rank(), Shape([("ranks", _crown.size())]))
    return Point(*here)


def current_size() -> Dict[str, int]:
    """The sizes of this actor's mesh (outside actors: {"ranks": N})."""
    here = _context.here()  # also on an actor's loop thread
    return dict(here[1].sizes) if here else {"ranks": _crown.size()}


def current_actor_name() -> str:
    """The name of the actor this code runs in, as in Monarch a distinct
    string for each member of each mesh: the mesh's spawn name followed by
    the member's point, e.g. ``"counter{'hosts': 0/1, 'procs': 2/4}"``.
    Outside actors (the controller's main): ``"client"``, Monarch's name for
    the controller's own actor."""
    instance = _context.current_instance()
    if instance is not None:
        name = instance.__dict__.get("_crown_actor_name")
    else:
        name = getattr(_spawning, "name", None)  # in cls.__init__, from spawn
    if name is None:
        return "client"
    return f"{name}{current_rank()}"


class ActorId(NamedTuple):
    """Which actor: its mesh's name and its rank (Monarch's actor_id)."""
    actor_name: str
    rank: int

    @property
    def proc_id(self) -> str:
        return str(self.rank)

    def __str__(self):
        return f"{self.actor_name}[{self.rank}]"


class Instance:
    """Monarch's ``context().actor_instance``: the actor this code runs for.
    ``rank`` is its Point in the mesh it was spawned over (as current_rank()),
    ``proc_mesh`` that ProcMesh, ``proc`` its own process, ``name`` its
    mesh's name, ``class_name`` its class's qualified name, ``actor_id`` an
    ActorId; str() is current_actor_name(). ``creator`` (who spawned it) is
    not recorded yet: None. Outside actors it is the controller's own
    instance, named "client", at its rank of the world."""

    def __init__(self):
        here = _context.here()  # also on an actor's loop thread
        instance = _context.current_instance()
        if instance is not None:
            name, cls = instance.__dict__.get("_crown_actor_name"), type(instance)
        else:  # in cls.__init__, from spawn
            name, cls = getattr(_spawning, "name", None), getattr(_spawning, "cls", None)
        if name is None or here is None:
            name, cls = "client", None
            shape = Shape([("ranks", _crown.size())])
            self.rank = Point(_crown.rank(), shape)
        else:
            shape = here[1]
            self.rank = Point(*here)
        self.name = name
        self.class_name = "client" if cls is None else f"{cls.__module__}.{cls.__qualname__}"
        self.proc_mesh = _actor_shim.proc_mesh()(shape)
        self.actor_id = ActorId(name, self.rank.rank)
        self.creator = None

    @property
    def proc(self):
        """The ProcMesh of just this actor's process."""
        return self.proc_mesh.slice(**self.rank)

    def __str__(self):
        return current_actor_name()

    def __repr__(self):
        return f"Instance({current_actor_name()})"


class _Context:
    def __init__(self):
        self.actor_instance = Instance()
        self.rank = current_rank()
        self.host = _crown.host()


def context() -> _Context:
    """Where this code runs: ``actor_instance`` (an Instance, as Monarch's;
    outside actors the controller's), ``rank`` (a Point), ``host``."""
    return _Context()
