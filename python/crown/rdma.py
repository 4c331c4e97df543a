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
            return RDMABuffer(self.weights.view(-1))  # a handle, not the bytes

    class Generator(Actor):
        @endpoint
        async def pull(self, handle):
            await handle.read_into(self.weights.view(-1))

A buffer lives until ``drop()`` (from any process), the stop of the actor
that created it, or the end of its process: the registration holds the
tensor, so the owner need keep nothing. A transfer starts when its future
is awaited or ``get()`` is called, as Monarch's do (a write waited on before
a read of the same memory is seen by the read); to run many at once, await
them together (``asyncio.gather``) or batch them in one :class:`RDMAAction`.

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


# The local memory of transfers started and not yet ended, kept alive here
# even when the caller drops its future: MPI may still write into (or read
# from) it until the transfer's C++ future is done, which it is only once
# MPI has let go of every byte (after a timeout too).
_transfers: List[Tuple[Any, Any]] = []
_transfers_lock = threading.Lock()


def _track_transfers(started):
    with _transfers_lock:
        _transfers[:] = [(f, local) for f, local in _transfers if not f.done()]
        _transfers.extend(started)


class RDMABuffer:
    """Memory of this process that other processes may read and write.

    The registration holds ``data`` (the tensor, array or memoryview) until
    it ends: ``drop()`` from any process, the stop of the actor that created
    it, or the end of its process. Nothing else ends it: an endpoint may
    ``return RDMABuffer(t)`` and keep nothing, and the buffer (and ``t``'s
    memory) stays readable until someone drops it."""

    def __init__(self, data):
        address, size, read_only, on_gpu = _memory(data, "RDMABuffer")
        if size == 0:
            raise ValueError("Cannot create an RDMABuffer of size 0")
        self._handle = _crown.RdmaHandle(address, size, read_only, on_gpu, data)
        if not is_rdma_available():
            warnings.warn("one-sided MPI is not in use (CROWN_RDMA_WINDOW=0, or MPI has no "
                          "window here): RDMA buffers move in chunks over crown's own fabric, "
                          "much slower than RDMA", RDMAFallbackWarning, stacklevel=2)

    @classmethod
    def _from_handle(cls, handle) -> "RDMABuffer":
        self = cls.__new__(cls)
        self._handle = handle
        return self

    def __reduce__(self):
        return _rebuild, self._handle.fields()

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
        """Reads the whole buffer into ``dst`` (1-D contiguous, at least size()
        bytes). The read starts when its future is awaited or ``get()`` is
        called (Monarch's rule), so it sees every transfer waited on before."""
        return RDMAAction().read_remote(dst, self).submit(timeout=timeout)

    def write_from(self, src, *, timeout: float = 60) -> Future:
        """Writes ``src`` (1-D contiguous, at most size() bytes) to the buffer's
        start, once its future is awaited or ``get()`` is called."""
        return RDMAAction().write_remote(self, src).submit(timeout=timeout)

    def drop(self) -> Future:
        """Ends the registration, from any process: later transfers fail with
        RDMAError, and the owner lets go of the memory. Unlike a transfer, the
        drop starts at once; its future completes once no transfer can touch
        the memory any more and the owner no longer holds it."""
        return Future(self._handle.drop().get)

    def __repr__(self):
        return f"RDMABuffer({self._handle.describe()})"


def _rebuild(owner, actor, address, size, id, read_only):
    return RDMABuffer._from_handle(
        _crown.RdmaHandle.from_fields(owner, actor, address, size, id, read_only))


class _Transfers(Future):
    """An RDMAAction's transfers, started when first waited on: by ``get()``
    (on the thread that calls it) or by ``await`` (on the event loop, when
    the awaiting task first runs, so the transfers of an asyncio.gather all
    start together before any is waited for). Monarch's futures start their
    work the same way, so a program orders its transfers by the order it
    waits on them."""

    def __init__(self, ops, timeout: float):
        self._ops = ops
        self._timeout = timeout
        self._started = None  # (C++ future, local memory) of each transfer, once started
        self._start_error = None  # a transfer that could not start (its ValueError)
        self._start_lock = threading.Lock()
        super().__init__(self._wait_all)

    def _start(self):
        """Starts the transfers, once; the later ones still start when one cannot."""
        with self._start_lock:
            if self._started is None:
                started = []
                for kind, buffer, local, address, size, on_gpu in self._ops:
                    handle = buffer._handle
                    move = handle.read_into if kind == "read" else handle.write_from
                    try:
                        started.append((move(address, size, self._timeout, on_gpu), local))
                    except Exception as e:  # noqa: BLE001 - raised once all are waited for
                        self._start_error = self._start_error or e
                _track_transfers(started)
                self._started, self._ops = started, None
            return self._started

    def _wait_all(self, wait_timeout: Optional[float]):
        error = None
        for future, _local in self._start():  # _local: kept alive until its transfer ended
            try:
                future.get(wait_timeout)
            except TimeoutError:
                raise
            except BaseException as e:  # noqa: BLE001 - every transfer is waited for
                error = error or e
        error = self._start_error or error
        if error is not None:
            raise error
        return None

    def __await__(self):
        self._start()  # now, on the loop: a gather's transfers all run before any is waited for
        return super().__await__()


class RDMAAction:
    """A batch of transfers submitted together: ``read_remote(dst, src)`` reads
    buffer ``src`` into local memory ``dst``; ``write_remote(dst, src)`` writes
    local ``src`` into buffer ``dst``. They run at the same time, once the
    future of ``submit()`` is awaited or its ``get()`` is called."""

    def __init__(self):
        self._ops = []  # (kind, buffer, local, address, bytes, on_gpu)

    def read_remote(self, dst, src: RDMABuffer) -> "RDMAAction":
        address, size, read_only, on_gpu = _memory(dst, "read_into: the destination")
        if read_only:
            raise ValueError("read_into: the destination is read-only")
        if size < src.size():
            raise ValueError(f"read_into: the destination holds {size} bytes, fewer than the "
                             f"{src.size()} of {src!r}")
        _crown.rdma_check_local(address, on_gpu)
        self._ops.append(("read", src, dst, address, size, on_gpu))
        return self

    def write_remote(self, dst: RDMABuffer, src) -> "RDMAAction":
        address, size, _, on_gpu = _memory(src, "write_from: the source")
        if size > dst.size():
            raise ValueError(f"write_from: the source holds {size} bytes, more than the "
                             f"{dst.size()} of {dst!r}")
        if dst._handle.read_only:
            raise ValueError(f"write_from: {dst!r} is read-only")
        _crown.rdma_check_local(address, on_gpu)
        self._ops.append(("write", dst, src, address, size, on_gpu))
        return self

    def submit(self, *, timeout: float = 60) -> Future:
        """The future of every transfer queued so far; they start when it is
        awaited or its ``get()`` is called (a future never waited on moves
        nothing), and it completes when all have, raising the first failure.
        The timeout runs from the start. Safe to call again: each future runs
        the transfers again."""
        if not timeout > 0:
            raise ValueError("an RDMA timeout must be positive")
        return _Transfers(list(self._ops), timeout)
