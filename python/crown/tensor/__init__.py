"""crown's distributed tensors, the controller's recording front end.

Inside `with mesh.activate():` torch factory functions and every op on mesh
tensors are recorded as commands (Call, Reduce, Delete) for the workers'
engines instead of run; each worker runs them with real torch on its own
shard. Results stay on the workers until fetched::

    with mesh.activate():
        x = torch.rand(1024, 1024)           # a shard on every worker
        y = (x @ x).relu().sum()
        total = y.reduce("procs", reduction="sum")
        print(inspect(total))                # a torch.Tensor on the controller

This package needs no compiled extension: a Mesh runs over any Backend
(crown.tensor._backend), such as LocalBackend, which simulates every rank in
this process.
"""

from ._backend import Backend, Future
from ._commands import Call, Delete, Reduce
from ._execute import Context, execute
from ._local import LocalBackend
from ._fetch import fetch_shard, inspect
from ._mesh import Mesh, no_mesh
from ._tensor import Tensor, slice_mesh, to_mesh
from ._remote import Remote, remote
from ._stream import Stream, main_stream
from . import _fast_record  # noqa: F401  (the C++ recording path, where there is one)
from . import _fetch, _op_cache, _record  # noqa: F401  (each sets its function in _hooks)
from .errors import (
    BorrowedTensorError,
    CollectiveGradError,
    DroppedTensorError,
    LocalTensorError,
    LocalValueError,
    MeshMismatchError,
    NoMeshError,
    RankLostError,
    RecordError,
    ReduceArgumentError,
    RemoteException,
    ShapeError,
    StreamError,
)

__all__ = [
    "Backend", "Future", "Call", "Delete", "Reduce", "Context", "execute", "LocalBackend",
    "Mesh", "Tensor", "fetch_shard", "inspect", "no_mesh", "Remote", "remote", "Stream",
    "slice_mesh", "to_mesh",
    "main_stream", "BorrowedTensorError", "StreamError",
    "CollectiveGradError", "DroppedTensorError", "LocalTensorError", "LocalValueError",
    "MeshMismatchError", "NoMeshError", "RecordError", "ReduceArgumentError",
    "RemoteException", "RankLostError", "ShapeError",
]
