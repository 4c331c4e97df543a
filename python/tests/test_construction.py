"""Construction does not block the caller (issue 47), under mpirun -n 4: a
member whose __init__ does not return holds up only itself. The controller's
next spawn, the mesh's other members, other meshes on the same proc, and
stop() go on; calls to that member wait behind its constructor and are
answered once it returns. Monarch's test_run_forever_on_init pattern: an
__init__ that spawns, hands the mesh out through a channel, then blocks."""

import threading
import time

import pytest

import crown
from crown.actor import Actor, Channel, current_rank, endpoint

STUCK_RANK = 1
# Set on a rank by its Gate actor: a stuck constructor there returns. A
# constructor that never returned would keep a thread busy past the test.
_opened = threading.Event()


class Gate(Actor):
    @endpoint
    def open(self):
        _opened.set()
        return current_rank().rank

    @endpoint
    def close(self):
        _opened.clear()


class StuckOnOneRank(Actor):
    def __init__(self):
        self.calls = 0
        if current_rank().rank == STUCK_RANK:
            assert _opened.wait(120), "the gate never opened"

    @endpoint
    def hello(self):
        self.calls += 1
        return current_rank().rank, self.calls


class Counter(Actor):
    def __init__(self, start):
        self.count = start

    @endpoint
    def value(self):
        return self.count


class SpawnsThenBlocks(Actor):
    """Monarch's RunForeverOnInitActor: its constructor's side effects reach
    the caller although the constructor itself does not return."""

    def __init__(self, procs, port):
        port.send(procs.spawn("counter_from_init", Counter, 42))
        assert _opened.wait(120), "the gate never opened"

    @endpoint
    def unreachable(self):
        return "constructed"


@pytest.fixture()
def gates():
    gates = crown.world().spawn("gates", Gate)
    gates.close.call().get(timeout=30)
    yield gates
    gates.open.call().get(timeout=30)  # whatever a failed test left blocked returns


def test_a_stuck_constructor_holds_up_only_its_own_member(gates):
    procs = crown.world()
    started = time.monotonic()
    stuck = procs.spawn("stuck", StuckOnOneRank)
    others = [r for r in range(procs.size()) if r != STUCK_RANK]
    # The other members answer at once.
    for rank in others:
        assert stuck.slice(procs=rank).hello.call_one().get(timeout=10) == (rank, 1)
    # The controller's next spawn, on every proc (the stuck one's included), serves.
    counters = procs.spawn("counters", Counter, 7)
    assert counters.value.call().get(timeout=10).values() == [7] * procs.size()
    # Calls to the stuck member wait for its constructor (or time out).
    with pytest.raises(TimeoutError):
        stuck.slice(procs=STUCK_RANK).hello.call_one().get(timeout=1.0)
    waiting = stuck.slice(procs=STUCK_RANK).hello.call_one()
    assert time.monotonic() - started < 30
    # Once its constructor returns, what waited is handled, in order (the
    # call that timed out too: it had been sent).
    assert gates.slice(procs=STUCK_RANK).open.call_one().get(timeout=10) == STUCK_RANK
    assert waiting.get(timeout=20) == (STUCK_RANK, 2)
    assert stuck.slice(procs=STUCK_RANK).hello.call_one().get(timeout=10) == (STUCK_RANK, 3)
    stuck.stop().get()
    counters.stop().get()


def test_an_init_that_spawns_then_blocks_still_hands_out_what_it_spawned(gates):
    procs = crown.world().slice(procs=STUCK_RANK)
    port, receiver = Channel.open()
    forever = procs.spawn("forever", SpawnsThenBlocks, procs, port)
    counter = receiver.recv().get(timeout=30)
    assert counter.value.call_one().get(timeout=10) == 42
    # stop() does not wait on the constructor that has not returned.
    started = time.monotonic()
    forever.stop().get()
    assert time.monotonic() - started < 10
    with pytest.raises(Exception, match="stopped"):
        forever.unreachable.call_one().get(timeout=10)
