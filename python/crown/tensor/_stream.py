"""Streams, after Monarch's: each stream of a mesh's engines runs its
commands in order, on its own thread, beside the other streams::

    comms = Stream("comms")
    with procs.activate():
        grad = compute()                      # the main stream
        g = comms.borrow(grad)                # comms sees grad as it is now
        with comms.activate():
            total = g.reduce_("procs")        # overlaps the main stream's next ops
        g.drop()                              # the main stream may write grad again

A tensor belongs to the stream that made it; another stream uses it through
a borrow. A shared borrow (mutable=False) lets nobody write the tensor until
it is dropped; a mutable one keeps the lender off it altogether. These rules
are checked as ops are recorded (StreamError, BorrowedTensorError); the
engines order the lender's commands after the drop behind the borrower's.
"""

import itertools
import threading

from . import _mesh
from ._commands import Borrow
from ._mesh import StreamBase, suspended
from ._tensor import Tensor
from .errors import BorrowedTensorError, DroppedTensorError, StreamError

_ids = itertools.count(1)
_borrow_ids = itertools.count(1)
_lock = threading.Lock()


class Stream(StreamBase):
    """A named stream of every mesh's engines."""

    def __init__(self, name: str):
        with _lock:
            super().__init__(next(_ids), name)

    def activate(self) -> "_StreamActivation":
        """Inside the with block, recorded ops run on this stream."""
        return _StreamActivation(self)

    def borrow(self, t: Tensor, mutable: bool = False) -> Tensor:
        """t, for this stream, as it is now on its own. Drop the result (or
        let it go) to give t back."""
        if not isinstance(t, Tensor):
            raise TypeError(f"borrow: expected a mesh tensor, got {type(t).__name__}")
        if t._ref is None:
            raise DroppedTensorError(f"borrow: the tensor (made at {t._location}) was dropped")
        if t._stream is self:
            raise StreamError(f"borrow: the tensor already belongs to stream {self.name!r}")
        if t._lent_mutably or (mutable and t._lent):
            raise BorrowedTensorError(
                f"borrow: the tensor (made at {t._location}) is already lent"
                f"{' mutably' if t._lent_mutably else ''}: drop that borrow first")
        if "_borrow" in t.__dict__ and mutable:
            raise BorrowedTensorError("borrow: a shared borrow cannot be lent on mutably")
        mesh = t._mesh
        location = _mesh._location()
        ref = mesh.backend.new_ref()
        with self.activate(), suspended():
            b = Tensor(t.__dict__.get("_fake"), mesh, ref, location, t._meta)
            bid = next(_borrow_ids)
            mesh._record(Borrow(bid, t._ref, ref, t._stream.id, bool(mutable)))
        b._borrow = (bid, t)
        if not mutable:
            b._lent = 1  # a shared borrow is read only
        t._lent += 1
        t._lent_mutably = bool(mutable)
        if mutable:
            t._known = None  # the borrower may write it
        return b

    def __repr__(self) -> str:
        return f"crown.Stream({self.name!r})"


class _StreamActivation:
    def __init__(self, stream: StreamBase):
        self.stream = stream

    def __enter__(self) -> StreamBase:
        self.previous = _mesh._stream_now
        _mesh._stream_now = self.stream
        return self.stream

    def __exit__(self, *exc) -> None:
        _mesh._stream_now = self.previous


def main_stream() -> StreamBase:
    """The stream recorded ops run on outside any Stream.activate()."""
    return _mesh.MAIN_STREAM
