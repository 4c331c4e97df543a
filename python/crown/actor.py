"""crown's actor API, after PyTorch Monarch's ``monarch.actor``.

Actors are classes deriving from :class:`Actor` whose methods marked
:func:`endpoint` can be called from elsewhere through an adverb::

    counters = crown.world().spawn("counter", Counter, 0)
    counters.incr.call(2).get()        # ValueMesh: every actor's reply (raises if one failed)
    counters.incr.call(2).value_mesh() # ValueMesh with each failed member's error in place
    counters.slice(procs=0).incr.call_one().get()
    counters.incr.choose().get()       # one actor, a different one each time
    for future in counters.incr.stream(): future.get()   # replies as they arrive
    counters.incr.broadcast()          # no replies
    counters.stop().get()              # the actors go; later calls fail

Calls travel through crown's C++ runtime (casts through multicast trees);
arguments and results are pickled (protocol 5, arrays out of band). Every
rank runs the same script, so classes and functions defined in it exist
everywhere; anything else travels by value (cloudpickle). An endpoint that
raises in a call with no caller (broadcast, a port's send) is logged on its
rank with its traceback and handed to crown's supervision path. One-way
messages lost for good (broadcasts lost with a cast hop that died, beyond
what its parent could resend) are reported to the sending rank, which hands
them to :func:`unhandled_fault_hook`.

This module is the public facade (Monarch's monarch.actor): it holds only
the fault hook (which C++ and _supervision look up here at each fault, so a
replacement counts at once) and re-exports what the modules below define:
_meshes.py (ProcMesh, ActorMesh, HostMesh, this_host, this_proc),
_endpoints.py (Actor, the endpoint decorators, errors, current_rank),
_values.py (Future, ValueMesh, Point), _calls.py (EndpointRef's adverbs,
as_endpoint, Accumulator) and _ports.py (Channel, Port, reply ports).
"""

from __future__ import annotations

import sys
import traceback

from . import _crown
from ._calls import Accumulator, EndpointRef, NotAnEndpoint, as_endpoint  # noqa: F401
# crown.actor is the public module (Monarch's monarch.actor): it re-exports
# what the modules below it define.
from ._endpoints import (DEFAULT_MAX_CONCURRENCY, Actor, ActorError,  # noqa: F401
                         ActorStoppedError, MixedEndpointsError, concurrent_endpoint, context,
                         current_actor_name, current_rank, current_size, endpoint)
from ._hosts import HostMesh, get_or_spawn_controller, shutdown_context, this_host  # noqa: F401
from ._meshes import R, ActorMesh, ProcMesh, this_proc  # noqa: F401
from ._ports import Channel, Port, PortReceiver, open_ports  # noqa: F401
from ._shape import Slice
from ._spawn_options import BootstrapCommand, default_bootstrap_cmd  # noqa: F401
from ._supervision import MeshFailure
from ._values import Future, Point, ValueMesh  # noqa: F401
from ._workers import attach_to_workers, run_worker_loop_forever  # noqa: F401

__all__ = [
    "Actor", "endpoint", "concurrent_endpoint", "ActorMesh", "ProcMesh", "ValueMesh", "Future", "Point",
    "ActorError", "ActorStoppedError", "SupervisionError", "MeshError", "Channel", "Port",
    "PortReceiver", "as_endpoint",
    "Accumulator", "current_rank", "current_size", "current_actor_name", "context", "this_host",
    "this_proc", "HostMesh", "Shape", "Slice", "MessagesLost", "MeshFailure",
    "unhandled_fault_hook", "UnhandledFault", "get_or_spawn_controller", "shutdown_context",
    "BootstrapCommand", "default_bootstrap_cmd",
]

SupervisionError = _crown.SupervisionError
MeshError = _crown.MeshError
# What main's crown waits raise once a fault is left unhandled: a SystemExit
# (code 1), so that `except Exception` does not swallow the end of the job.
UnhandledFault = _crown.UnhandledFault
Shape = _crown.Shape


class MessagesLost:
    """A fault that no caller hears of: the actor ``actor`` (its name) on rank
    ``rank`` gave up waiting for ``count`` one-way messages (numbers ``first``
    to ``last``) that ``sender`` (rank, local id) sent it, after the order gap
    timeout (CROWN_ORDER_GAP_TIMEOUT_MS). In practice: broadcasts lost with a
    cast hop that died, beyond what its parent could resend
    (CROWN_CAST_RESEND_WINDOW). ``str()`` says all that."""

    def __init__(self, sender, rank, actor, count, first, last, message):
        self.sender = sender
        self.rank = rank
        self.actor = actor
        self.count = count
        self.first = first
        self.last = last
        self.message = message

    def __str__(self):
        return self.message

    def __repr__(self):
        return f"MessagesLost({self.message!r})"


def unhandled_fault_hook(failure) -> None:
    """Called on the controller with each fault that nothing else handles: a
    :class:`MeshFailure` (a member of a mesh the controller spawned died, or
    an actor's ``__supervise__`` passed one up), or a :class:`MessagesLost`
    (on the rank that sent the lost messages). Replace it
    (``crown.actor.unhandled_fault_hook = my_hook``, Monarch's name) to act on
    it; it runs on a runtime thread, so it should return quickly. Returning
    drops the fault. Raising (the default raises SystemExit(1) for a
    MeshFailure, as Monarch's does) leaves it unhandled: crown prints the
    report and the job exits 1 within ``CROWN_FAULT_GRACE_MS`` (1 s) whatever
    main is doing: main's crown waits raise :class:`UnhandledFault`, main
    gets a KeyboardInterrupt (a real SIGINT), and a main that does not end
    in time is ended. The default prints a MessagesLost and returns."""
    if isinstance(failure, MeshFailure):
        sys.exit(1)
    print(f"crown: unhandled fault: {failure}", file=sys.stderr, flush=True)


def _messages_lost(sender, rank, actor, count, first, last, message):
    # The runtime's hook (python/src/bind_runtime.cpp), with the GIL. The
    # module's hook is looked up at each call, so a replacement counts at once.
    try:
        unhandled_fault_hook(MessagesLost(sender, rank, actor, count, first, last, message))
    except BaseException:  # noqa: BLE001 - a failing hook must not take the runtime down
        traceback.print_exc()
