"""RDMA buffers: one-sided reads and writes of registered memory (Monarch's
``monarch.rdma`` names).

An actor registers memory as an :class:`RDMABuffer` and hands the handle out
(it pickles into any message); whoever holds it reads the bytes straight
into its own memory (``read_into``) or writes them (``write_from``), over
the world's MPI window (MPI_Rget/MPI_Rput: the RDMA hardware of the
cluster, shared memory on one host). The bytes never pass through the
owner's actors or the controller::

    class Trainer(Actor):
        @endpoint
        def publish(self):
            self.buffer = RDMABuffer(self.weights.view(-1))
            return self.buffer                     # a handle, not the bytes

    class Generator(Actor):
        @endpoint
        def pull(self, handle):
            handle.read_into(self.weights.view(-1)).get()

A buffer takes a torch tensor (CPU or CUDA), a numpy array or a memoryview,
1-D and contiguous (``t.view(-1)`` or ``t.view(torch.uint8)`` of a contiguous
tensor). Errors: ``ValueError`` for a size-0 or non-contiguous buffer and for
a destination too small (before anything moves); :class:`RDMAError` for a
dropped buffer (or one whose owner actor stopped), and for a handle whose
address and size, edited after pickling, do not lie within the registration
its id names (the owner refuses it before any byte moves); ``TimeoutError`` when a
transfer outlives its timeout (the buffer stays usable);
``SupervisionError`` when the owner's process dies. docs/rdma.md has the
design and the figures.
"""

import collections
import threading
import warnings
from typing import Any, List, Optional, Tuple

from . import _crown
from .actor import Future

__all__ = ["RDMABuffer", "RDMAAction", "RDMAError", "RDMAFallbackWarning", "Owner",
           "is_rdma_available", "is_ibverbs_available", "get_rdma_backend"]

RDMAError = _crown.RDMAError


class RDMAFallbackWarning(Warning):
    """RDMA buffers move over crown's own fabric: one-sided MPI is not in use."""


warnings.simplefilter("once", RDMAFallbackWarning)

#: Who registered a buffer: its rank, and the local id of its actor (0: none).
Owner = collections.namedtuple("Owner", ["rank", "actor"])


def is_rdma_available() -> bool:
    """True when transfers use one-sided MPI (False: the fabric fallback)."""
    return bool(_crown.rdma_stats()["window"])


def is_ibverbs_available() -> bool:
    """Monarch's name. False: crown drives no ibverbs device itself; its
    transfers go over one-sided MPI (which may use InfiniBand underneath)
    or over crown's own links (get_rdma_backend())."""
    return False


def get_rdma_backend() -> str:
    """Monarch's name, with crown's backends: "mpi" when transfers use
    one-sided MPI windows, "fabric" when they go over crown's own links
    (CROWN_RDMA_WINDOW=0, or an MPI without one-sided support). Never
    "none": a buffer can always be moved. (Monarch's values are "ibverbs",
    "tcp" and "none".)"""
    return "mpi" if is_rdma_available() else "fabric"


def _is_tensor(obj) -> bool:
    torch = __import__("sys").modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _memory(obj, what: str) -> Tuple[int, int, bool, bool]:
    """(address, bytes, read_only, on_gpu) of obj's memory, which must be 1-D and
    contiguous."""
    if _is_tensor(obj):
        if obj.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{what}: a tensor on {obj.device}; crown's RDMA buffers take CPU "
                             "and CUDA memory: copy it to one of them first")
        if obj.dim() != 1:
            raise ValueError(f"{what}: a {obj.dim()}-D tensor; it must be 1-D and contiguous "
                             "(t.view(-1) of a contiguous tensor)")
        if not obj.is_contiguous():
            raise ValueError(f"{what}: a non-contiguous tensor (stride {obj.stride()}); "
                             "make it contiguous first (t.contiguous())")
        return (obj.data_ptr(), obj.numel() * obj.element_size(), False,
                obj.device.type == "cuda")
    if isinstance(obj, memoryview):
        if obj.ndim != 1 or not obj.c_contiguous:
            raise ValueError(f"{what}: the memoryview must be 1-D and contiguous "
                             f"(it has {obj.ndim} dimension(s), strides {obj.strides})")
        if obj.nbytes == 0:
            return 0, 0, obj.readonly, False
        import numpy

        return (numpy.frombuffer(obj, dtype=numpy.uint8).ctypes.data, obj.nbytes, obj.readonly,
                False)
    numpy = __import__("sys").modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        if obj.ndim != 1 or not obj.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{what}: the array must be 1-D and contiguous (it has shape "
                             f"{obj.shape}, strides {obj.strides}); use a.ravel() of a "
                             "contiguous array")
        return obj.ctypes.data, obj.nbytes, not obj.flags["WRITEABLE"], False
    raise ValueError(f"{what}: {type(obj).__name__} is not a torch tensor, numpy array or "
                     "memoryview")


# Buffers garbage-collected without drop(): their memory stays alive here
# until the owner has detached it (no transfer can touch it then).
_retiring: List[Tuple[Any, Any]] = []
_retiring_lock = threading.Lock()


def _prune_retiring():
    with _retiring_lock:
        _retiring[:] = [(f, keep) for f, keep in _retiring if not f.done()]


# The local memory of transfers not yet ended, kept alive here even when
# the caller drops its future: MPI may still write into (or read from) it
# until the transfer's C++ future is done, which it is only once MPI has let
# go of every byte (after a timeout too).
_transfers: List[Tuple[Any, Any]] = []
_transfers_lock = threading.Lock()


def _track_transfers(started):
    with _transfers_lock:
        _transfers[:] = [(f, local) for f, local in _transfers if not f.done()]
        _transfers.extend(started)


class RDMABuffer:
    """Memory of this process that other processes may read and write."""

    def __init__(self, data):
        address, size, read_only, on_gpu = _memory(data, "RDMABuffer")
        if size == 0:
            raise ValueError("Cannot create an RDMABuffer of size 0")
        _prune_retiring()
        self._handle = _crown.RdmaHandle(address, size, read_only, on_gpu)
        self._keep = data  # the memory stays valid until the drop has finished
        if not is_rdma_available():
            warnings.warn("one-sided MPI is not in use (CROWN_RDMA_WINDOW=0, or MPI has no "
                          "window here): RDMA buffers move in chunks over crown's own fabric, "
                          "much slower than RDMA", RDMAFallbackWarning, stacklevel=2)

    @classmethod
    def _from_handle(cls, handle) -> "RDMABuffer":
        self = cls.__new__(cls)
        self._handle = handle
        self._keep = None  # a copy of the handle: the memory is its owner's
        return self

    def __reduce__(self):
        return _rebuild, self._handle.fields()

    def __del__(self):
        keep = getattr(self, "_keep", None)
        if keep is None:
            return
        try:
            # Garbage-collected undropped: most often with its owner actor's
            # state as the actor stops, so later readers are told that.
            future = self._handle.drop_because(
                "dropped when its RDMABuffer was garbage-collected (its owner actor stopped, "
                "or the last reference to it went)")
        except Exception:  # noqa: BLE001 - the runtime is gone: nothing can read it any more
            return
        with _retiring_lock:
            _retiring.append((future, keep))

    def size(self) -> int:
        """Its size in bytes."""
        return self._handle.size

    @property
    def owner(self) -> Owner:
        return Owner(self._handle.owner, self._handle.owner_actor)

    @property
    def backend(self) -> str:
        return "mpi" if is_rdma_available() else "fabric"

    def read_into(self, dst, *, timeout: float = 60) -> Future:
        """Reads the whole buffer into ``dst`` (1-D contiguous, at least size() bytes)."""
        return RDMAAction().read_remote(dst, self).submit(timeout=timeout)

    def write_from(self, src, *, timeout: float = 60) -> Future:
        """Writes ``src`` (1-D contiguous, at most size() bytes) to the buffer's start."""
        return RDMAAction().write_remote(self, src).submit(timeout=timeout)

    def drop(self) -> Future:
        """Ends the registration: later transfers fail with RDMAError. Its future
        completes once no transfer can touch the memory any more."""
        future = self._handle.drop()
        keep, self._keep = self._keep, None

        def wait(timeout):
            future.get(timeout)
            nonlocal keep
            keep = None  # released once the owner has detached the memory
        if keep is not None and not future.done():
            with _retiring_lock:
                _retiring.append((future, keep))
        return Future(wait)

    def __repr__(self):
        return f"RDMABuffer({self._handle.describe()})"


def _rebuild(owner, actor, address, size, id, read_only):
    return RDMABuffer._from_handle(
        _crown.RdmaHandle.from_fields(owner, actor, address, size, id, read_only))


class RDMAAction:
    """A batch of transfers submitted together: ``read_remote(dst, src)`` reads
    buffer ``src`` into local memory ``dst``; ``write_remote(dst, src)`` writes
    local ``src`` into buffer ``dst``. They run at the same time."""

    def __init__(self):
        self._ops = []  # (kind, buffer, local, address, bytes, on_gpu)

    def read_remote(self, dst, src: RDMABuffer) -> "RDMAAction":
        address, size, read_only, on_gpu = _memory(dst, "read_into: the destination")
        if read_only:
            raise ValueError("read_into: the destination is read-only")
        if size < src.size():
            raise ValueError(f"read_into: the destination holds {size} bytes, fewer than the "
                             f"{src.size()} of {src!r}")
        self._ops.append(("read", src, dst, address, size, on_gpu))
        return self

    def write_remote(self, dst: RDMABuffer, src) -> "RDMAAction":
        address, size, _, on_gpu = _memory(src, "write_from: the source")
        if size > dst.size():
            raise ValueError(f"write_from: the source holds {size} bytes, more than the "
                             f"{dst.size()} of {dst!r}")
        self._ops.append(("write", dst, src, address, size, on_gpu))
        return self

    def submit(self, *, timeout: float = 60) -> Future:
        """Starts every transfer; the future completes when all have, and
        raises the first failure. Safe to call again (the transfers run again)."""
        if not timeout > 0:
            raise ValueError("an RDMA timeout must be positive")
        started = []
        for kind, buffer, local, address, size, on_gpu in self._ops:
            handle = buffer._handle
            if kind == "read":
                started.append((handle.read_into(address, size, timeout, on_gpu), local))
            else:
                started.append((handle.write_from(address, size, timeout, on_gpu), local))
        _track_transfers(started)

        def wait(wait_timeout: Optional[float]):
            error = None
            for future, _local in started:  # _local: kept alive until its transfer ended
                try:
                    future.get(wait_timeout)
                except TimeoutError:
                    raise
                except BaseException as e:  # noqa: BLE001 - every transfer is waited for
                    error = error or e
            if error is not None:
                raise error
            return None
        return Future(wait)
