"""The exceptions of crown's distributed tensors.

RecordError and its subclasses are raised on the controller, while an op is
being recorded, before anything is sent: nothing of the failed op reaches a
worker. RemoteException is what a fetch raises when the op that defined the
fetched tensor (or one it depended on) failed on a worker; the backend
raises it.
"""


class RecordError(Exception):
    """An op could not be recorded; nothing was sent to the workers."""


class LocalTensorError(RecordError, ValueError):
    """A local torch tensor was mixed with mesh tensors (or used inside activate())."""


class MeshMismatchError(RecordError, ValueError):
    """Tensors of two meshes met in one op, or a tensor met a mesh it does not live on."""


class DroppedTensorError(RecordError, RuntimeError):
    """A tensor was used after drop()."""


class ShapeError(RecordError, ValueError):
    """The op does not accept its inputs' shapes or dtypes (found on fake tensors)."""


class CollectiveGradError(RecordError, RuntimeError):
    """A collective (reduce) was asked of a tensor that requires grad."""


class LocalValueError(RecordError, RuntimeError):
    """The op needs the tensor's values on the controller (item(), bool(), ...)."""


class NoMeshError(RecordError, RuntimeError):
    """No mesh to record on: a factory or a remote function with no mesh
    tensor argument, outside activate() or inside no_mesh."""


class StreamError(RecordError, RuntimeError):
    """A tensor was used on a stream other than its own (borrow it first)."""


class BorrowedTensorError(RecordError, RuntimeError):
    """A lent tensor was used by its lender (mutable borrow) or written
    (shared borrow), or a shared borrow was written, before the borrow was
    dropped."""


class KernelError(Exception):
    """Raised by execute() on a worker when the op itself fails; the engine turns
    it into a RemoteException for the refs the command defines (deferred error)."""

    def __init__(self, op: str, message: str, traceback: str):
        super().__init__(f"{op}: {message}")
        self.op = op
        self.message = message
        self.traceback = traceback


class RemoteException(Exception):
    """An op failed on a worker. Raised at fetch (or the next synchronising
    call) for every tensor that depends on the failed op.

    op: the op that failed (e.g. "aten::mm" or "pkg.mod.func"); rank: the
    worker's rank; message: the worker's error message; traceback: the
    worker's traceback text; location: the controller's file:line that
    recorded the op."""

    def __init__(self, op: str, rank: int, message: str, traceback: str = "", location: str = ""):
        super().__init__(op, rank, message, traceback, location)
        self.op = op
        self.rank = rank
        self.message = message
        self.traceback = traceback
        self.location = location

    def __str__(self) -> str:
        where = f" (recorded at {self.location})" if self.location else ""
        text = f"{self.op} failed on rank {self.rank}{where}: {self.message}"
        if self.traceback:
            text += "\nworker traceback:\n" + self.traceback
        return text


class ReduceArgumentError(RecordError, ValueError):
    """A reduce with unknown dims, an unknown reduction, or a shape it cannot split."""


def _supervision_error():
    try:
        from .. import _crown
    except ImportError:  # the recording layer alone, without the runtime
        return Exception
    return _crown.SupervisionError


class RankLostError(RemoteException, _supervision_error()):
    """An op failed because a rank of its group was lost (killed, crashed)
    while it ran: a SupervisionError as well as a RemoteException.
    lost_rank names the lost rank."""

    def __init__(self, op, rank, message, traceback="", location="", lost_rank=None):
        RemoteException.__init__(self, op, rank, message, traceback, location)
        self.lost_rank = lost_rank
