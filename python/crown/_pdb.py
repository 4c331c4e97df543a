"""Remote pdb (issue 15): ``breakpoint()`` in an endpoint, on any rank, stops
there, and its pdb talks to ``crown debug`` through the controller instead
of to a terminal the rank does not have (crown/debug/pdb.h).

A session's output is kept until pdb reads a line; the read sends it, with
where the session stopped, to the controller's debug agent and waits (GIL
released) for the line typed for it. Outside endpoints (the controller's
own program) ``breakpoint()`` is the ordinary local pdb. With
``CROWN_DEBUG_POST_MORTEM=1`` an endpoint that raises stops in post-mortem
pdb on its rank first, listed like a breakpoint; its caller gets the
exception once the session continues.
"""

from __future__ import annotations

import bdb
import itertools
import os
import pdb
import sys

from . import _context, _crown

_next_session = itertools.count(1)


class _Relay:
    """pdb's stdin and stdout."""

    def __init__(self, debugger: "RemotePdb"):
        self._debugger = debugger
        self._pending = []

    def write(self, text: str) -> int:
        self._pending.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def _take(self) -> str:
        text = "".join(self._pending)
        self._pending.clear()
        return text

    def readline(self) -> str:
        line = _crown.pdb_prompt(self._debugger.where(), self._take())
        return "" if line is None else line + "\n"  # "": EOF, and pdb continues

    def ended(self) -> None:
        _crown.pdb_ended(self._debugger.where(), self._take())


class RemotePdb(pdb.Pdb):
    def __init__(self):
        self._relay = _Relay(self)
        super().__init__(stdin=self._relay, stdout=self._relay, nosigint=True)
        self.use_rawinput = False
        self._where = _crown.PdbSession()
        self._where.rank = _crown.rank()
        self._where.session = next(_next_session)
        self._where.host = _crown.host()
        instance = _context.current_instance()
        name = instance.__dict__.get("_crown_actor_name") if instance is not None else None
        self._where.actor = name or "client"
        here = _context.here()
        if here is not None:
            self._where.member = here[0]
            self._where.coords = ",".join(f"{label}={index}" for label, index in
                                          here[1].coordinates(here[0]).items())

    def where(self):
        frame = getattr(self, "curframe", None)
        if frame is not None:
            self._where.function = frame.f_code.co_name
            self._where.file = frame.f_code.co_filename
            self._where.line = frame.f_lineno
        return self._where

    def set_continue(self):
        super().set_continue()
        self._relay.ended()

    def set_quit(self):
        super().set_quit()  # the endpoint raises BdbQuit, as under a local pdb
        self._relay.ended()

    def do_EOF(self, arg):
        """Nobody will type to this session any more (the job ends): go on."""
        return self.do_continue(arg)


def in_endpoint() -> bool:
    # _run's own record (set on whatever thread runs the endpoint); the C++
    # side's covers an actor's loop thread.
    return _context.current_instance() is not None or _context.current_actor() is not None


def breakpoint_hook(*args, **kwargs):
    """sys.breakpointhook on every rank: remote in an endpoint, else local."""
    if not in_endpoint() or os.environ.get("PYTHONBREAKPOINT") == "0":
        return sys.__breakpointhook__(*args, **kwargs)
    RemotePdb().set_trace(sys._getframe().f_back)


def post_mortem_if_asked(error: BaseException) -> None:
    """CROWN_DEBUG_POST_MORTEM=1: stop at the frame that raised, until continued."""
    if os.environ.get("CROWN_DEBUG_POST_MORTEM", "") in ("", "0") or not in_endpoint():
        return
    if isinstance(error, bdb.BdbQuit):  # the user quit pdb here already
        return
    debugger = RemotePdb()
    debugger.reset()
    debugger.interaction(None, error.__traceback__)


def install() -> None:
    sys.breakpointhook = breakpoint_hook
