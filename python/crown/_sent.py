"""Mesh tensors sent to actors, kept alive on the caller until the actors
have read their shards.

A mesh tensor pickled into an actor's message travels as a token: the actor
reads its rank's shard from the engine when the message is unpickled, which
may be long after the send when the actor is busy. If the caller's tensor
died meanwhile, its delete could reach the engine first ("ref N is not
defined on this proc"). So the sending thread collects the tensors it
pickles (Tensor.__reduce_ex__ calls note()), and the adverb that sent them
holds them until something says every actor has handled the message: the
call's own reply, or, for adverbs without one (broadcast, stream), a fence
(FENCE) sent after it, which each actor handles after the message (ORD-1).

Held tensors are let go lazily, when a later send or flush looks (prune());
a caller's Future need not live for its tensors to.
"""

import contextlib
import threading
from typing import Any, Callable, List, Tuple

_collecting = threading.local()
_lock = threading.Lock()
_held: List[Tuple[Callable[[], bool], List[Any]]] = []  # (done?, the tensors it keeps)


def note(tensor) -> None:
    """A mesh tensor is being pickled (on this thread)."""
    sink = getattr(_collecting, "sink", None)
    if sink is not None:
        sink.append(tensor)


@contextlib.contextmanager
def collecting():
    """The mesh tensors pickled on this thread within the block, as a list."""
    outer = getattr(_collecting, "sink", None)
    sink: List[Any] = []
    _collecting.sink = sink
    try:
        yield sink
    finally:
        _collecting.sink = outer


def hold(tensors: List[Any], done: Callable[[], bool]) -> None:
    """Keeps `tensors` alive until done() is true."""
    if not tensors:
        return
    with _lock:
        _held[:] = [entry for entry in _held if not entry[0]()]
        _held.append((done, tensors))


def prune() -> None:
    """Lets go of the tensors whose messages every actor has handled."""
    if not _held:  # unlocked: a racing hold() prunes too
        return
    with _lock:
        _held[:] = [entry for entry in _held if not entry[0]()]


def held() -> int:
    """How many sends still keep tensors (tests)."""
    with _lock:
        return len(_held)
