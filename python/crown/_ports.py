"""Channels and reply ports (crown.actor re-exports the public ones): a Port
is a picklable address that actors send values to, received in order by
its PortReceiver; a ported endpoint's caller waits on a per-member reply
port (_PortedReplies), never for good (DLV-1)."""

from __future__ import annotations

import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generic, List, Optional, Tuple,
                    TypeVar)

from . import _crown, _pickle, _protocol
from ._endpoints import ActorError, ActorStoppedError, _entry_error, _outcome, _unpicklable
from ._values import Future

if TYPE_CHECKING:
    from ._calls import EndpointRef


R = TypeVar("R")

SupervisionError = _crown.SupervisionError


# Channels: a Port is a picklable address that actors send values to; its
# PortReceiver, on the process that opened the channel, receives them in
# order. Both are native ports (crown/actor/port.h): an entry of this
# process's request table, so the receiver fails with its owner (DLV-1) and
# a stream port's senders wait for its receiver (FLO-1). A ported
# endpoint's reply port (_PortedReplies) is a per-member native port.


def open_ports() -> int:
    """How many PortReceivers this process holds open (for tests and leak hunts)."""
    return _crown.open_ports()


class _Failed:
    """An exception sent to a port (Port.exception): where it was sent from
    and the exception as a caller reads it (_protocol.raised_body)."""

    def __init__(self, rank: int, body: bytes):
        self.rank, self.body = rank, body

    def error(self, actor: str, endpoint: Optional[str] = None) -> "ActorError":
        return _outcome(_protocol.RAISED + self.body, self.rank, actor, endpoint)


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
        except Exception as e:  # noqa: BLE001 - pickling fails in many types
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
        self._post(_Failed(_crown.rank(), _protocol.raised_body(error)), "Port.exception()")

    def __reduce__(self):
        return (Port, (self._handle,))


class _DroppingPort(Port):
    """A broadcast's port (Monarch's DroppingPort): nobody waits, so values
    are dropped (no port is open for it), and an exception sent to it is
    raised where it is sent, so that it kills the actor as any failed
    one-way call does."""

    def __init__(self):
        super().__init__(None)

    def send(self, value) -> None:
        pass

    def exception(self, error: BaseException) -> None:
        raise error

    def __reduce__(self):
        return (_DroppingPort, ())


class _PortedReplies:
    """The replies of one call to a ported endpoint (explicit_response_port,
    concurrent_endpoint): each member's first value or exception sent to the
    call's reply port, in arrival order.

    The reply port is a native per-member port (crown/actor/port.h) watching
    the members, so DLV-1 holds with no polling and no probing: the port
    hears at once, as an error item, when a member returns without replying
    (its last handle dropped unsent), when the actor holding it stops or
    dies, and when a member's process is lost. The call itself travels as a
    request (a cast's members each answer): a member whose call fails (it
    was refused, or the endpoint raised) settles with that failure, which is
    preferred over the port's error item for the same member (it says why).
    The caller waits on one thing at a time: the calls while some are
    outstanding (each ends: DLV-1), taking what the port has meanwhile
    without waiting, then the port."""

    def __init__(self, ref: "EndpointRef", ranks: List[int]):
        self._ref = ref
        self._actor = ref._mesh._name
        self._receiver = _crown.open_port("per_member", list(ranks))
        self.port = Port(self._receiver.port())
        self._ranks = list(ranks)
        self._open = set(ranks)  # members with no outcome yet
        self._outcomes: Dict[int, Tuple[Any, Optional[BaseException]]] = {}
        self._arrivals: List[int] = []  # members in the order their outcomes came
        self._calls: Optional[Callable[[Optional[float]], Any]] = None  # the next call outcome
        self._called: Dict[int, Optional[BaseException]] = {}  # member -> its call's failure
        self._held: Dict[int, BaseException] = {}  # member -> a port error, until its call ends
        self._ended = False  # the port gave every member's item
        self._lock = threading.Lock()

    def watch_request(self, rank: int, pending) -> None:
        def next_call(timeout):
            if self._calls is None:
                return None
            try:
                returned = _outcome(pending.get(timeout), rank, self._actor, self._ref._name)
                error = returned if isinstance(returned, ActorError) else None
            except TimeoutError:
                raise
            except Exception as failure:  # noqa: BLE001 - the member's outcome
                error = failure
            self._calls = None
            return rank, error

        self._calls = next_call

    def watch_stream(self, stream) -> None:
        def next_call(timeout):
            item = stream.next(timeout)  # TimeoutError when nothing came in time
            if item is None:
                self._calls = None
                return None
            (rank, _, error), = self._ref._entries([item])
            return rank, error

        self._calls = next_call

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

        def late():
            return TimeoutError(f"{what} of {self._actor}.{self._ref._name} did not arrive "
                                f"within {timeout} s")

        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise late()
        try:
            while not enough():
                while self._open and not self._ended and self._port(0):
                    pass  # what the port has now, without waiting
                if enough():
                    break
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    if self._calls is not None:
                        called = self._calls(left)
                        if called is not None:
                            self._call_ended(*called)
                    elif self._ended:  # every member's item was taken: nothing more comes
                        for rank in list(self._open):
                            held = self._held.pop(rank, None)
                            self._settle(rank, None, held or _crown.CrownError(
                                f"the reply port of {self._actor}.{self._ref._name} ended "
                                f"without rank {rank}'s reply"))
                    elif left == 0:
                        raise TimeoutError
                    else:
                        self._port(left)
                except TimeoutError:
                    raise late() from None
        finally:
            self._lock.release()

    def _port(self, timeout: Optional[float]) -> bool:
        """Takes one item of the reply port (TimeoutError when none came in
        time; with timeout 0, False instead)."""
        try:
            entry = self._receiver.next(timeout)
        except TimeoutError:
            if timeout == 0:
                return False
            raise
        if entry is None:  # each member's item was taken (held ones wait for their calls)
            self._ended = True
            return False
        rank, payload, failure = entry
        if rank not in self._open and len(self._ranks) == 1:
            rank = self._ranks[0]  # sent from elsewhere by the one member's forwarded port
        if failure is not None:  # the member let the port go, or it or its process went
            if failure[0] == "dropped":  # its last handle went unsent
                error = ActorError(f"rank {rank}, actor '{self._actor}': "
                                   f"{self._ref._name} returned without replying ({failure[1]})",
                                   rank=rank, actor=self._actor, remote_type="dropped")
            else:
                error = _entry_error(failure, self._actor, self._ref._name, rank)
            if rank in self._called:  # its call has ended well: this is its outcome
                self._settle(rank, None, error)
            else:  # its call says why, as it ends
                self._held.setdefault(rank, error)
            return True
        item = _pickle.loads(payload)
        if isinstance(item, _Failed):
            self._settle(rank, None, item.error(self._actor, self._ref._name))
        else:
            self._settle(rank, item, None)
        return True

    def _call_ended(self, rank: int, error: Optional[BaseException]) -> None:
        self._called[rank] = error
        if rank not in self._open:
            return
        if error is not None:
            if isinstance(error, _crown.ActorStoppedError) and not isinstance(
                    error, ActorStoppedError):
                error = ActorStoppedError(str(error), rank=rank, actor=self._actor,
                                          remote_type="stopped")
            self._settle(rank, None, error)
        elif rank in self._held:
            self._settle(rank, None, self._held.pop(rank))

    def _settle(self, rank: int, value, error: Optional[BaseException]) -> None:
        if rank not in self._open:
            return  # its first outcome counts; what comes later is dropped
        self._open.discard(rank)
        self._outcomes[rank] = (value, error)
        self._arrivals.append(rank)
        self._held.pop(rank, None)
        if not self._open:
            self._receiver.close()  # later sends to the port are dropped, quietly
            self._calls = None


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
