"""The seam between the recording layer and an engine that runs the commands.

The controller side is single-threaded: the recording layer calls a backend
from the thread that records (the user's), never concurrently.
"""

from typing import Dict, Protocol, runtime_checkable

import torch


@runtime_checkable
class Future(Protocol):
    def get(self) -> torch.Tensor:
        """The fetched shard; raises RemoteException when its op (or one it used) failed."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What a mesh's tensor engine offers the controller.

    new_ref(): a fresh ref id, unique on this backend.
    record(command): appends a Call, Reduce or Delete to the pending batch.
    flush(): sends the pending batch; the recording layer calls it before a
      fetch and on leaving activate(); a backend may also flush by itself
      (every N commands).
    fetch(ref, rank): a Future of that rank's shard of ref, ordered after
      every command recorded before it.
    shape: the mesh's labels and sizes in order, e.g. {"hosts": 1, "procs": 4}
      (row-major: rank = ravel of the coordinates).
    """

    def new_ref(self) -> int: ...

    def record(self, command) -> None: ...

    def flush(self) -> None: ...

    def fetch(self, ref: int, rank: int) -> Future: ...

    @property
    def shape(self) -> Dict[str, int]: ...
