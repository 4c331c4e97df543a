"""Backpressure (FLO-1) under mpirun -n 2, with CROWN_MAILBOX_LIMIT_MESSAGES
set to 100 for this job: the controller floods a slow actor on rank 1 with
one-way broadcasts of 64 KiB; it is held back to the actor's pace, so the
actor never has more than the limit waiting, and its memory stays flat
(issue 10: the sender never slowed down, and a slow receiver grew from 51
to 745 MB in 3.5 s)."""

import resource
import time
from multiprocessing import shared_memory

import numpy as np
import pytest

import crown
from crown.actor import Actor, endpoint

LIMIT = 100
MESSAGES = 2000
HANDLE_SECONDS = 0.0005
CHUNK = np.ones(64 * 1024 // 8)


def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Slow(Actor):
    """Records, as it handles each message, how many the controller had sent
    by then and it had not handled yet (the controller counts its sends in
    shared memory: both ranks are on this host)."""

    def __init__(self):
        self.handled = 0
        self.max_backlog = 0
        self.sent = None

    @endpoint
    def watch(self, name):
        self._shm = shared_memory.SharedMemory(name=name)
        self.sent = np.ndarray((1,), dtype=np.int64, buffer=self._shm.buf)
        self.base = peak_rss()

    @endpoint
    def work(self, chunk):
        self.handled += 1
        self.max_backlog = max(self.max_backlog, int(self.sent[0]) - self.handled)
        time.sleep(HANDLE_SECONDS)

    @endpoint
    def report(self):
        return self.handled, self.max_backlog, peak_rss() - self.base


@pytest.fixture()
def counter():
    shm = shared_memory.SharedMemory(create=True, size=8)
    sent = np.ndarray((1,), dtype=np.int64, buffer=shm.buf)
    sent[0] = 0
    yield shm, sent
    del sent
    shm.close()
    shm.unlink()


def test_a_flooding_broadcast_loop_slows_to_the_receivers_pace(counter):
    shm, sent = counter
    slow = crown.world().slice(procs=1).spawn("slow", Slow)
    slow.watch.call_one(shm.name).get(timeout=30)
    start = time.monotonic()
    for _ in range(MESSAGES):
        sent[0] += 1
        slow.work.broadcast(CHUNK)
    loop_seconds = time.monotonic() - start
    handled, max_backlog, growth = slow.report.call_one().get(timeout=60)
    assert handled == MESSAGES
    assert max_backlog <= LIMIT + 1, "the actor's mailbox grew past CROWN_MAILBOX_LIMIT_MESSAGES"
    # Held back: the loop could end only once all but a window were handled.
    assert loop_seconds >= (MESSAGES - LIMIT) * HANDLE_SECONDS
    # Flat memory: the 125 MiB sent never waited at the actor at once.
    assert growth < 32 * 1024 * 1024


class Quick(Actor):
    def __init__(self):
        self.handled = 0

    @endpoint
    def note(self):
        self.handled += 1

    @endpoint
    def count(self):
        return self.handled


def test_a_window_drained_and_refilled_never_stalls():
    """Rounds of broadcasts to an actor on the controller's own rank, each
    round ended by a call that waits for them all, so that the window
    drains between rounds. Found by python/tests/chaos.py: a drained window
    was dropped with the count of what had been credited, and the next
    send made a new one that counted every message sent to the pair since
    the first as in flight; past the limit each send then asked for credit,
    and a credit that came before the sender slept (as a local one always
    does) woke nobody: a stall of 1 s per message. 200 rounds send 18,000
    messages, 180 times the limit."""
    quick = crown.world().slice(procs=0).spawn("quick", Quick)
    start = time.monotonic()
    for round_ in range(200):
        for n in range(LIMIT - 10):
            quick.note.broadcast()
            assert time.monotonic() - start < 20, f"round {round_}, message {n}: stalled"
        assert quick.count.call_one().get(timeout=10) == (round_ + 1) * (LIMIT - 10)
