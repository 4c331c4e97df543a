"""Channels and reply ports (crown.actor re-exports the public ones): a Port
is a picklable address that actors send values to, received in order by
its PortReceiver; a ported endpoint's caller waits on a reply port
(_PortedReplies), never for good (DLV-1)."""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Dict, Generic, List, Optional, Tuple, TypeVar

from . import _crown, _pickle, _runtime, _supervision
from ._endpoints import (Actor, ActorError, ActorStoppedError, _entry_error, _outcome, _unpicklable,
                         endpoint)
from ._values import Future

if TYPE_CHECKING:
    from ._calls import EndpointRef


R = TypeVar("R")

SupervisionError = _crown.SupervisionError


# Channels: a Port is a picklable address that actors send values to; its
# PortReceiver, on the process that opened the channel, receives them in
# order. Both are native ports (crown/actor/port.h): an entry of this
# process's request table, so the receiver fails with its owner (DLV-1) and
# a stream port's senders wait for its receiver (FLO-1).
#
# A ported endpoint's reply port (_ReplyPort, _PortedReplies) still goes
# through one port actor per process (spawned by the first ported call
# there), which routes every value by port id to its waiter's queue.
_receivers: Dict[int, "queue.Queue"] = {}  # port id -> a reply port's queue
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
                from .actor import this_proc  # here: actor.py imports this module

                ports = this_proc().spawn("crown-ports", _PortActor)
                ports._ready()  # Port.send goes to it directly
                _port_actor = ports._local
        return _port_actor


def open_ports() -> int:
    """How many PortReceivers this process holds open (for tests and leak hunts)."""
    return _crown.open_ports() + len(_receivers)


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
    Picklable, so it travels inside messages: unpickled in an actor, it is
    held there, and its receiver hears if that actor stops or dies."""

    def __init__(self, handle: "_crown.PortHandle"):
        self._handle = handle

    def _post(self, item, what: str) -> None:
        try:
            parts = _pickle.dumps_parts(item)
        except TypeError as e:
            raise _unpicklable(e, what, (item,), {}) from None
        self._handle.send(*parts)

    def send(self, value) -> None:
        """One-way: nothing waits (but a sender far ahead of the receiver
        waits for it: FLO-1); a value for a closed port is dropped."""
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
        return (Port, (self._handle,))


class _ActorPort(Port):
    """A reply port through this process's port actor (_PortedReplies)."""

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

    def __reduce__(self):
        return (_ActorPort, (self._rank, self._local, self._port_id))


class _ReplyPort(_ActorPort):
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


class _DroppingPort(_ActorPort):
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
    reference to it, closes the port. It fails with the actor that opened
    it (ActorStoppedError, SupervisionError), as a call does."""

    def __init__(self, receiver: "_crown.PortReceiver"):
        self._receiver = receiver

    def recv(self) -> Future[R]:
        """The next value sent to the port, as a Future (Monarch's):
        ``recv().get(timeout=5)`` raises TimeoutError when nothing came within
        5 s and can be tried again; ``await receiver.recv()`` also works."""
        return Future(self._take)

    def _take(self, timeout: Optional[float]):
        try:
            entry = self._receiver.next(timeout)
        except TimeoutError:
            raise TimeoutError(f"nothing arrived at the port within {timeout} s") from None
        if entry is None:
            raise _crown.CrownError("the port is closed, and every value sent before was read")
        rank, payload, failure = entry
        if failure is not None:  # its sender stopped or died holding it
            raise _entry_error(failure, "port", "send", rank)
        item = _pickle.loads(payload)
        if isinstance(item, _Failed):  # Port.exception: raised here, as Monarch's is
            error = item.error("port")
            raise error.exception if error.exception is not None else error
        return item

    def close(self) -> None:
        """Later values sent to the port are dropped; those already here can still be read."""
        self._receiver.close()


class Channel(Generic[R]):
    """Opens channels: ``port, receiver = Channel[int].open()`` (the type
    argument is for type checkers only)."""

    @staticmethod
    def open() -> Tuple[Port[R], PortReceiver[R]]:
        """A new (Port, PortReceiver) pair whose receiver lives in this process
        (owned by the running actor, else by this process)."""
        receiver = _crown.open_port("stream")
        return Port(receiver.port()), PortReceiver(receiver)
