"""Lazy, typed entry points into crown.actor for the modules below it.

As Monarch's _src/actor/tensor_engine_shim.py: _supervision sits below the
meshes and the public facade (both import it), yet needs the ActorMesh
class (_meshes) to rebuild a failed mesh, and the controller's
unhandled_fault_hook, which a user may replace on crown.actor at any time.
Each is looked up when called, never imported at load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Type

if TYPE_CHECKING:
    from ._meshes import ActorMesh, ProcMesh
    from ._supervision import MeshFailure


def _actor():
    return importlib.import_module("crown.actor")


def actor_mesh() -> Type[ActorMesh]:
    """crown._meshes.ActorMesh (crown.actor's)."""
    return importlib.import_module("crown._meshes").ActorMesh


def proc_mesh() -> Type[ProcMesh]:
    """crown._meshes.ProcMesh (crown.actor's), for context().actor_instance."""
    return importlib.import_module("crown._meshes").ProcMesh


def unhandled_fault_hook(failure: MeshFailure) -> None:
    """Calls crown.actor.unhandled_fault_hook as it is now (a user's
    replacement included)."""
    _actor().unhandled_fault_hook(failure)
