"""Calling the actors of a mesh: EndpointRef and its adverbs (call,
call_one, choose, stream, broadcast, rref), as_endpoint for methods not
marked @endpoint, the stream's arrivals and the Accumulator (crown.actor
re-exports the public ones). Mesh tensors among the arguments live until
every actor has read them (crown/_sent.py)."""

from __future__ import annotations

import functools
import inspect
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Tuple

from . import _crown, _pickle, _protocol, _sent
from ._endpoints import (ActorError, ActorStoppedError, _check_propagate, _entry_error,
                         _outcome, _supervision_error, _unpicklable, endpoint)
from ._ports import Port, _DroppingPort, _PortedReplies
from ._values import Future, ValueMesh, _all_succeeded

if TYPE_CHECKING:
    from ._meshes import ActorMesh


SupervisionError = _crown.SupervisionError
MeshError = _crown.MeshError


class EndpointRef:
    """An endpoint of every actor of a mesh, called through an adverb."""

    def __init__(self, mesh: ActorMesh, name: str, method: Optional[Tuple[bool, Any]] = None):
        self._mesh = mesh
        self._name = name
        self._only_rank = None  # call_one's rank, once checked
        if method is not None:  # as_endpoint(mesh.method): (explicit_response_port, propagate)
            explicit, self._propagate = method
            self._ported = explicit
            self._wire = (_protocol.METHOD, name, explicit)  # what the call names
            return
        found = inspect.getattr_static(mesh._cls, name, None)
        # Its reply comes through a port (explicit_response_port, concurrent_endpoint).
        self._ported = isinstance(found, endpoint) and found.ported
        self._propagate = found.propagate if isinstance(found, endpoint) else None
        self._wire = name

    def __call__(self, *args, **kwargs):
        raise TypeError(f"call an endpoint through an adverb: {self._name}.call(...), "
                        f".call_one(...), .choose(...), .stream(...) or .broadcast(...)")

    def _replies(self, ranks: List[int]) -> Optional[_PortedReplies]:
        """A ported endpoint's reply port for a call to `ranks`; None for any other."""
        return _PortedReplies(self, ranks) if self._ported else None

    def _message(self, args, kwargs, adverb: str, port: Optional[Port] = None):
        """The pickled call in two parts, head and out-of-band buffers, as
        every adverb sends it (one encoding, direct or cast); a ported
        endpoint's port goes first, before the caller's arguments. Raises
        before anything is sent (what pickling raised, with a note)."""
        call = (self._wire, args if port is None else (port, *args), kwargs)
        try:
            return _pickle.dumps_parts(call)
        except Exception as e:  # noqa: BLE001 - pickling fails in many types
            raise _unpicklable(e, f"{self._name}.{adverb}()", args, kwargs) from None

    def _entries(self, raw) -> List[Tuple[int, Any, Optional[BaseException]]]:
        entries = []
        for rank, payload, error in raw:
            if error is not None:
                entries.append((rank, None, _entry_error(error, self._mesh._name, self._name,
                                                         rank)))
                continue
            value = _outcome(payload, rank, self._mesh._name, self._name)
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
        replies = self._replies(mesh._shape.ranks())
        with _sent.collecting() as sent:
            parts = self._message(args, kwargs, "call", replies and replies.port)
        if replies is not None:  # each member's reply comes through the port
            replies.watch_stream(_crown.cast_stream(mesh._shape, mesh._local, *parts))
            _hold_until_handled(sent, mesh)
            entries = replies.entries
        else:
            pending = _crown.cast_call(mesh._shape, mesh._local, *parts)
            _sent.hold(sent, pending.done)
            entries = lambda timeout: self._entries(pending.get(timeout))  # noqa: E731
        every = Future(lambda timeout: ValueMesh(mesh._shape, entries(timeout)))
        future = Future(lambda timeout: _all_succeeded(every.get(timeout)))
        future._mesh = every
        return future

    def _direct(self, rank: int, args, kwargs, adverb: str) -> Future:
        """One actor's reply: a request, and for a ported endpoint its reply
        port too (a per-member port watching that member's rank)."""
        replies = self._replies([rank])
        with _sent.collecting() as sent:
            parts = self._message(args, kwargs, adverb, replies and replies.port)
        pending = _crown.request(rank, self._mesh._local, *parts)
        _sent.hold(sent, pending.done)  # done when the endpoint returns: it has read them
        if replies is not None:
            replies.watch_request(rank, pending)
            return Future(lambda timeout: replies.one(rank, timeout))

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
            value = _outcome(payload, rank, self._mesh._name, self._name)
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
        return self._direct(self._only_rank, args, kwargs, "call_one")

    def choose(self, *args, **kwargs) -> Future:
        """One actor's reply, spreading calls over the live actors."""
        return self._direct(_crown.choose_rank(self._mesh._shape), args, kwargs, "choose")

    def stream(self, *args, **kwargs) -> Iterator[Future]:
        """Casts now and yields one Future per actor (Monarch's
        Iterator[Future]): the k-th future's get() gives the k-th reply to
        arrive, or raises that member's error; ``get(timeout)`` raises
        TimeoutError when it has not come, and can be tried again."""
        return self._stream(args, kwargs, "stream")

    def _stream(self, args, kwargs, adverb: str) -> Iterator[Future]:
        """stream(), for an adverb built on it (Accumulator's accumulate)."""
        mesh = self._mesh
        replies = self._replies(mesh._shape.ranks())
        with _sent.collecting() as sent:
            parts = self._message(args, kwargs, adverb, replies and replies.port)
        pending = _crown.cast_stream(mesh._shape, mesh._local, *parts)
        _hold_until_handled(sent, mesh)
        if replies is not None:  # each member's reply comes through the port
            replies.watch_stream(pending)
            take = replies.take
        else:
            take = _Arrivals(self, pending).take
        return (Future(functools.partial(take, k)) for k in range(len(mesh._shape)))

    def rref(self, *args, **kwargs):
        """Calls the endpoint on every actor and keeps what each returns (a
        torch tensor) on its own rank, as one mesh tensor whose shard on each
        rank is that actor's result (crown.tensor): use it in the actors'
        ProcMesh's activate(). Waits for every actor; raises what one raised,
        and ValueError when their tensors differ in shape or dtype. With a
        propagator (``@endpoint(propagate=...)``, ``as_endpoint(...,
        propagate=...)``), returns its outputs' pytree with each tensor a
        mesh tensor kept from the results' tensors in order, and None for
        ``propagate="inspect"``."""
        from .tensor._engine import rref

        if self._ported:
            raise TypeError(f"{self._name} replies through a port (explicit_response_port or "
                            f"concurrent_endpoint): rref() keeps what an endpoint returns")
        return rref(self._mesh._shape, self._mesh._local, self._wire, args, kwargs,
                    lambda raw: self._entries(raw), self._propagate)

    def broadcast(self, *args, **kwargs) -> None:
        """Sends to every actor; no replies. A mesh tensor among the arguments
        lives until every actor has read its shard, however soon the caller
        lets go of it."""
        mesh = self._mesh
        # A ported endpoint gets a port that drops values and raises an exception sent to it.
        with _sent.collecting() as sent:
            parts = self._message(args, kwargs, "broadcast",
                                  _DroppingPort() if self._ported else None)
        _crown.cast_broadcast(mesh._shape, mesh._local, *parts)
        _hold_until_handled(sent, mesh)


class NotAnEndpoint:
    """A method of an actor mesh's class not marked @endpoint (Monarch's
    NotAnEndpoint): ``mesh.method`` gives one, so that
    ``as_endpoint(mesh.method)`` can call it; calling it raises."""

    def __init__(self, mesh: ActorMesh, name: str):
        self._mesh = mesh
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"Actor {self._mesh._cls}.{self._name} is not annotated as an endpoint. To call it "
            f"as one, add a @endpoint decorator to it, or directly wrap it in one "
            f"as_endpoint(obj.method).call(...)")

    def __getattr__(self, name):
        if name in _ADVERBS:
            raise AttributeError(
                f"{self._mesh._cls.__qualname__}.{self._name} is not an endpoint: mark it "
                f"@endpoint, or call it through as_endpoint(mesh.{self._name}).{name}(...)")
        raise AttributeError(name)

    def __repr__(self):
        return f"<NotAnEndpoint {self._mesh._cls.__qualname__}.{self._name}>"


_ADVERBS = ("call", "call_one", "choose", "stream", "broadcast", "rref")


def as_endpoint(not_an_endpoint: NotAnEndpoint, *, propagate=None,
                explicit_response_port: bool = False) -> EndpointRef:
    """Monarch's ``as_endpoint``: a method of a spawned actor mesh's class
    that is not marked ``@endpoint`` (``mesh.method``), as an endpoint with
    every adverb: ``as_endpoint(mesh.forward).call(x)``, and with a
    propagator, ``as_endpoint(mesh.forward, propagate=fn).rref(x)``. The
    options are ``endpoint``'s. Raises ValueError for anything but such a
    method (an endpoint already, a function, a mesh's attribute that is not
    a method)."""
    if not isinstance(not_an_endpoint, NotAnEndpoint):
        raise ValueError(f"as_endpoint: expected a method of a spawned actor (mesh.method), "
                         f"not {not_an_endpoint!r}")
    mesh, name = not_an_endpoint._mesh, not_an_endpoint._name
    if not inspect.isfunction(inspect.getattr_static(mesh._cls, name, None)):
        raise ValueError(f"as_endpoint: {mesh._cls.__qualname__}.{name} is not a method "
                         f"(a def or async def of the class)")
    method = (bool(explicit_response_port), _check_propagate(propagate, "as_endpoint"))
    mesh._ready()
    return EndpointRef(mesh, name, method)


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
    """Folds an endpoint's replies into one value, as Monarch's does:
    ``Accumulator(counters.value, 0, operator.add).accumulate().get()``.

    ``accumulate(*args, **kwargs)`` calls ``endpoint.stream(*args,
    **kwargs)`` at once and folds the replies from the left in the order
    they arrive, ``combine(...combine(combine(identity, r0), r1)..., rn)``:
    ``combine`` takes the value so far and one reply, so the two may differ
    in type, and an empty stream gives ``identity``. A member's failure, or
    an exception of ``combine``, is what the Future's get() raises. Any
    object with a ``stream`` method folds (a fake endpoint in a test too),
    and endpoints that reply through a port do.

    ``in_tree=True`` (crown's) folds up the cast tree instead: each hop folds
    the replies of its subtree with ``combine`` (which travels pickled with
    the cast, by value when it must), so the caller receives one value, not
    one per actor. ``combine`` must then take two replies, be associative and
    commutative (replies fold in arrival order), and pickle (TypeError here
    otherwise); ``identity`` is folded in once, on the caller:
    ``combine(identity, folded)``. An endpoint or a combine that raises fails
    the result with MeshError naming the ranks whose replies could not be
    folded, with the error and its traceback."""

    def __init__(self, endpoint_ref: EndpointRef, identity, combine: Callable[[Any, Any], Any],
                 *, in_tree: bool = False):
        self._endpoint, self._identity, self._combine = endpoint_ref, identity, combine
        self._key = None
        if not in_tree:
            return
        if not isinstance(endpoint_ref, EndpointRef):
            raise TypeError(f"Accumulator(in_tree=True) folds up the cast tree of an actor "
                            f"mesh's endpoint (mesh.endpoint_name), not {endpoint_ref!r}")
        if endpoint_ref._ported:
            raise TypeError(f"{endpoint_ref._name} replies through a port "
                            f"(explicit_response_port or concurrent_endpoint): the cast tree "
                            f"cannot fold its replies; leave out in_tree=True")
        try:
            self._key = _protocol.reducer_key(combine)
        except Exception as e:  # noqa: BLE001 - pickling fails in many types
            e.add_note("Accumulator: its combine cannot be pickled, so it cannot travel to the "
                       "cast's hops; define it at the top level, or capture only what pickles")
            raise

    def accumulate(self, *args, **kwargs) -> Future:
        if self._key is not None:
            return self._in_tree(args, kwargs)
        ref = self._endpoint
        if isinstance(ref, EndpointRef):  # a failure to send names accumulate()
            replies = ref._stream(args, kwargs, "accumulate")
        else:
            replies = ref.stream(*args, **kwargs)
        return Future(_Fold(replies, self._identity, self._combine).wait)

    def _in_tree(self, args, kwargs) -> Future:
        ref = self._endpoint
        mesh = ref._mesh
        with _sent.collecting() as sent:
            parts = ref._message(args, kwargs, "accumulate")
        pending = _crown.cast_reduce(mesh._shape, mesh._local, *parts, self._key)
        _sent.hold(sent, pending.done)

        def wait(timeout):
            outcome = pending.get(timeout)  # MeshError when a member or a fold failed
            return self._combine(self._identity, _pickle.loads(outcome[1:]))

        return Future(wait)


class _Fold:
    """accumulate()'s fold over a stream of futures, from the left. A get
    that times out keeps what is folded so far and the reply it waits for;
    the next get goes on from there (the Future's lock keeps gets apart)."""

    _END = object()

    def __init__(self, replies, identity, combine):
        self._replies, self._value, self._combine = iter(replies), identity, combine
        self._waiting = None  # the reply's future being waited on

    def wait(self, timeout: Optional[float]):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._waiting is None:
                self._waiting = next(self._replies, self._END)
            if self._waiting is self._END:
                return self._value
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            reply = self._waiting.get(left)  # TimeoutError: tried again later
            self._waiting = None
            self._value = self._combine(self._value, reply)


def _hold_until_handled(sent: List[Any], mesh) -> None:
    """Keeps the mesh tensors of a message with no reply of its own (sent)
    until every actor of mesh has handled it: a fence cast after it answers
    once each actor has handled what came before (ORD-1)."""
    if sent:
        fence = _crown.cast_call(mesh._shape, mesh._local,
                                 *_pickle.dumps_parts((_protocol.FENCE, (), {})))
        _sent.hold(sent, fence.done)
