"""Stacks of every process (issue 15): ``procs.stacks()``.

Every rank registers faulthandler on a signal of crown's own at bootstrap
(install), writing into a file of its own; the C++ debug module
(crown/debug/stacks.h) raises that signal on its agent's thread when the
controller asks, so the dump needs no GIL and comes even from a rank whose
Python thread spins in C. What comes back is merged: threads whose stacks
are alike across ranks are printed once, with the ranks that share them
("ranks 0-3,5"), so the odd one out stands out.
"""

from __future__ import annotations

import faulthandler
import re
import signal
import tempfile
from typing import Dict, List, NamedTuple, Tuple

from . import _crown

STACKS_SIGNAL = signal.SIGRTMIN + 7  # one no library of a usual job uses
_dump_file = None  # kept open for the process's life: faulthandler writes to its descriptor


def install() -> None:
    """After bootstrap, on every rank: faulthandler dumps every thread here on STACKS_SIGNAL."""
    global _dump_file
    if _dump_file is not None:
        return
    _dump_file = tempfile.TemporaryFile(prefix="crown-stacks-")
    faulthandler.register(STACKS_SIGNAL, file=_dump_file, all_threads=True, chain=False)
    _crown.set_stack_dump(_dump_file.fileno(), int(STACKS_SIGNAL))


class RankStacks(NamedTuple):
    rank: int
    host: str
    pid: int
    python: str  # faulthandler's dump: every thread, most recent call first
    native: str  # eu-stack's, when asked for; or why there is none
    error: str   # why the rank did not answer ("" when it did)

    def threads(self) -> List[Tuple[str, ...]]:
        """Each Python thread's frames (the thread's id left out, so that
        alike stacks of different processes compare equal)."""
        threads, current = [], None
        for line in self.python.splitlines():
            if re.match(r"^(Current thread|Thread) 0x[0-9a-f]+", line):
                current = []
                threads.append(current)
            elif current is not None and line.strip():
                current.append(line.rstrip())
        # A thread with no Python frame (one of crown's, between callbacks) says nothing.
        return [tuple(frames) for frames in threads
                if frames and frames != ["  <no Python frame>"]]


def ranges(ranks) -> str:
    """[0, 1, 2, 3, 5] -> "0-3,5"."""
    ranks = sorted(ranks)
    parts, start = [], None
    for i, rank in enumerate(ranks):
        if start is None:
            start = rank
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            parts.append(str(start) if start == rank else f"{start}-{rank}")
            start = None
    return ",".join(parts)


class Stacks:
    """The stacks of a mesh's ranks: ``by_rank`` (rank -> RankStacks), and
    str() the merged report."""

    def __init__(self, replies: List[RankStacks]):
        self.by_rank: Dict[int, RankStacks] = {reply.rank: reply for reply in replies}

    def merged(self) -> List[Tuple[List[int], Tuple[str, ...]]]:
        """(ranks, frames) of each distinct Python thread stack, the most shared first."""
        sharing: Dict[Tuple[str, ...], List[int]] = {}
        for rank, reply in sorted(self.by_rank.items()):
            for frames in set(reply.threads()):
                sharing.setdefault(frames, []).append(rank)
        return sorted(((ranks, frames) for frames, ranks in sharing.items()),
                      key=lambda entry: (-len(entry[0]), entry[0]))

    def __str__(self) -> str:
        lines = []
        silent = [reply for reply in self.by_rank.values() if reply.error]
        for ranks, frames in self.merged():
            lines.append(f"ranks {ranges(ranks)}:" if len(ranks) > 1 else f"rank {ranks[0]}:")
            lines.extend(frames or ["  (no Python frames)"])
        for reply in sorted(silent):
            lines.append(f"rank {reply.rank} ({reply.host}) did not answer: {reply.error}")
        natives = [reply for reply in self.by_rank.values() if reply.native]
        for reply in sorted(natives):
            lines.append(f"rank {reply.rank} native (pid {reply.pid} on {reply.host}):")
            lines.extend("  " + line for line in reply.native.splitlines())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Stacks(ranks {ranges(self.by_rank)})"


def collect(ranks: List[int], native: bool, timeout: float) -> Stacks:
    raw = _crown.stacks(list(ranks), native, timeout)
    return Stacks([RankStacks(rank, host, pid, python.decode("utf-8", "replace"),
                              native_text.decode("utf-8", "replace"), error)
                   for rank, host, pid, python, native_text, error in raw])
