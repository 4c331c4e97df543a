"""Which actor this code runs for: the bottom of the Python runtime.

current_instance() is the actor instance whose endpoint (or __init__) runs
on this thread, here() the (rank, Shape) of its mesh member, also on an
actor's loop thread, and current_actor() the (rank, local id) this thread
acts for. _runtime sets them as it dispatches; _endpoints, _pdb and the
layers above read them without importing the dispatcher. The process's
flags live here too: whether the front end is in place, tracing, and
whether this job is served.
"""

import threading

from . import _crown

_current = threading.local()  # the actor instance whose endpoint this thread runs

# Set once init() has put this rank's front end in place (output
# forwarding, stack dumps, breakpoint()): the proc serves as soon as its
# runtime is up, and a spawn could otherwise run the user's code first (a
# print that went past the forwarder, python.logs under load).
front_end_ready = threading.Event()
FRONT_END_WAIT_S = 30.0
tracing = False  # CROWN_TRACE: set by crown.init, once this rank knows
served = False  # this job is crownrun --serve's: crown.run(main) runs main inside it (_console.py)

# An attached client (_attach.py) tells the served job what it made, so
# that the next client finds it: these are set while it is attached.
mesh_spawned = None  # (name, ActorMesh): an actor mesh spawned here
mesh_stopped = None  # (mesh id): ... stopped
ranks_handed_out = None  # (ranks): launch ranks that spawn_procs gave


def current_instance():
    return getattr(_current, "instance", None)


def here():
    """_crown.here(), also on an actor's loop thread (where C++ sees no actor
    running): (rank, Shape) of the mesh actor this code runs for, or None."""
    point = _crown.here()
    if point is None:
        loop = getattr(_current, "loop", None)
        if loop is not None:
            return loop.here
    return point


def current_actor():
    """(rank, local id) of the actor this code runs for, or None: the actor
    whose endpoint runs, whose __init__ runs (not the mesh agent that builds
    it), on whose loop thread, or that started this thread
    (_crown.acting_actor, which the supervision layer records as the owner of
    every mesh spawned here)."""
    return _crown.acting_actor()
