"""Where the controller runs: ``crown.run(main, controller=...)``.

"shared" (the default): rank 0 is the controller and also a member of the
world mesh, hosting actors like every other rank, so ``mpirun -n 8`` on an
8-GPU node gives a mesh of 8. "dedicated": rank 0 only controls, and the
world meshes (crown.world, crown.world_flat, this_host on the controller)
are ranks 1..N-1. See docs/supervision.md for the trade-off.
"""

from . import _crown

PLACEMENTS = ("shared", "dedicated")
controller = "shared"


def choose(placement: str) -> None:
    global controller
    if placement not in PLACEMENTS:
        raise ValueError(f"controller={placement!r}: crown.run takes controller='shared' "
                         f"(rank 0 controls and hosts actors) or 'dedicated' (rank 0 only "
                         f"controls)")
    controller = placement


def without_controller(shape, flat: bool):
    """shape (the launch's world) without rank 0 when the controller is dedicated."""
    if controller == "shared":
        return shape
    size = _crown.size()
    if size < 2:
        raise ValueError("controller='dedicated' needs at least 2 ranks: rank 0 only "
                         "controls, so with 1 there is nobody to host actors")
    if flat:
        return shape.select({"ranks": slice(1, size)})
    if shape.size("hosts") != 1:
        raise ValueError(f"controller='dedicated' on {shape.size('hosts')} hosts: without "
                         f"rank 0 the hosts hold different numbers of ranks, so crown.world() "
                         f"has no {{'hosts', 'procs'}} shape; use crown.world_flat() (ranks "
                         f"1..{size - 1})")
    return shape.select({"procs": slice(1, shape.size("procs"))})
