"""Endpoints that reply through a port and endpoints that run concurrently,
under mpirun -n 4 (issue 13's names still missing):

- @endpoint(explicit_response_port=True): the endpoint gets a Port first and
  replies with port.send / port.exception, now or later; an exception that
  escapes it kills the actor, and its caller gets SupervisionError instead of
  waiting (DLV-1), as does the caller of a member that dies or stops before
  replying.
- @concurrent_endpoint: async bodies that overlap each other and the actor's
  next messages, at most max_concurrency at once (the next waits); ordinary
  async endpoints stay one at a time; tasks are cancelled when the actor stops.
- An actor mixing sync and async endpoints is refused at spawn (Monarch's rule).
"""

import asyncio
import os
import tempfile
import threading
import time

import pytest

import crown
import crown.actor
from crown.actor import (Actor, ActorError, ActorStoppedError, Channel, Port, SupervisionError,
                         concurrent_endpoint, current_rank, endpoint)

WAIT = 20  # seconds: generous; a hang would run into it


class Deferred(Actor):
    """Sync endpoints that reply through their port, some of them later."""

    def __init__(self):
        self.waiting = []

    @endpoint(explicit_response_port=True)
    def now(self, port: Port[int], x):
        port.send(x * 10)
        port.send("a second value is dropped")
        return "what it returns is ignored"

    @endpoint(explicit_response_port=True)
    def ask(self, port: Port[int], x):
        self.waiting.append((port, x))  # answered by answer(), a later message

    @endpoint
    def answer(self, bonus):
        waiting, self.waiting = self.waiting, []
        for port, x in waiting:
            port.send(x + bonus)
        return len(waiting)

    @endpoint(explicit_response_port=True)
    def from_thread(self, port: Port[int], x):
        threading.Timer(0.3, port.send, (x + current_rank().rank,)).start()

    @endpoint(explicit_response_port=True)
    def refuse(self, port, message):
        try:
            raise KeyError(message)
        except KeyError as error:
            port.exception(error)

    @endpoint(explicit_response_port=True)
    def crash(self, port):
        raise ValueError("escaped its port")

    @endpoint
    def fail(self):
        raise RuntimeError("a broadcast that raises kills the actor")

    @endpoint(explicit_response_port=True)
    def forget(self, port):
        pass  # returns without replying, keeping nothing

    @endpoint
    def alive(self):
        return current_rank().rank


def test_endpoint_stays_bare_and_gains_options():
    assert isinstance(Deferred.__dict__["alive"], endpoint)
    assert not Deferred.__dict__["alive"].explicit_response_port
    assert Deferred.__dict__["ask"].explicit_response_port
    with pytest.raises(ValueError, match="can only wrap async endpoints"):
        concurrent_endpoint(lambda self: None)
    with pytest.raises(ValueError, match="does not wrap @endpoint"):
        async def body(self):
            pass
        concurrent_endpoint(endpoint(body))
    with pytest.raises(ValueError, match="at least 1"):
        concurrent_endpoint(max_concurrency=0)(body)


def test_every_adverb_returns_what_is_sent_to_the_port():
    deferred = crown.world_flat().spawn("ported_adverbs", Deferred)
    assert deferred.slice(ranks=1).now.call_one(4).get(timeout=WAIT) == 40
    assert deferred.now.call(2).get(timeout=WAIT).values() == [20] * 4
    assert deferred.now.choose(3).get(timeout=WAIT) == 30
    assert sorted(f.get(timeout=WAIT) for f in deferred.now.stream(5)) == [50] * 4
    deferred.now.broadcast(6)  # nobody waits: the values are dropped
    assert deferred.alive.call().get(timeout=WAIT).values() == [0, 1, 2, 3]  # all live


def test_a_reply_sent_later_from_another_endpoint():
    deferred = crown.world_flat().spawn("ported_later", Deferred)
    one = deferred.slice(ranks=2)
    pending = one.ask.call_one(5)
    everyone = deferred.ask.call(100)
    with pytest.raises(TimeoutError):
        pending.get(timeout=0.3)  # not sent yet
    assert one.answer.call_one(1).get(timeout=WAIT) == 2  # its own ask and the cast's
    assert pending.get(timeout=WAIT) == 6
    deferred.slice(ranks=slice(0, 2)).answer.call(1).get(timeout=WAIT)
    deferred.slice(ranks=3).answer.call_one(1).get(timeout=WAIT)
    assert everyone.get(timeout=WAIT).values() == [101] * 4


def test_a_reply_sent_later_from_a_thread():
    deferred = crown.world_flat().spawn("ported_thread", Deferred)
    assert deferred.from_thread.call(1000).get(timeout=WAIT).values() == [1000, 1001, 1002, 1003]


def test_a_member_that_returns_without_replying_fails_its_caller_at_once():
    deferred = crown.world_flat().spawn("ported_forgets", Deferred)
    deferred.alive.call().get(timeout=WAIT)  # spawned everywhere
    start = time.monotonic()
    with pytest.raises(ActorError, match="without") as raised:
        deferred.slice(ranks=3).forget.call_one().get(timeout=WAIT)
    assert time.monotonic() - start < 0.5  # no probe interval
    assert raised.value.rank == 3
    start = time.monotonic()
    mesh = deferred.forget.call().value_mesh(timeout=WAIT)
    assert time.monotonic() - start < 0.5
    assert [rank for rank, _ in mesh.errors()] == [0, 1, 2, 3]
    assert deferred.alive.call().get(timeout=WAIT).values() == [0, 1, 2, 3]  # all live


def test_port_exception_raises_actor_error_at_the_caller_and_the_actor_lives():
    deferred = crown.world_flat().spawn("ported_refuses", Deferred)
    with pytest.raises(ActorError, match="KeyError") as raised:
        deferred.slice(ranks=3).refuse.call_one("no thanks").get(timeout=WAIT)
    assert raised.value.rank == 3
    assert isinstance(raised.value.__cause__, KeyError)
    assert "refuse" in raised.value.traceback  # where it was raised
    assert deferred.slice(ranks=3).alive.call_one().get(timeout=WAIT) == 3


def test_port_exception_on_a_plain_channel_raises_it_at_the_receiver():
    port, receiver = Channel.open()
    port.exception(KeyError("sent instead of a value"))
    port.send(7)
    with pytest.raises(KeyError, match="sent instead of a value"):
        receiver.recv().get(timeout=WAIT)
    assert receiver.recv().get(timeout=WAIT) == 7


class Keeper(Actor):
    """Holds channels' ports, and pours values into them."""

    def __init__(self):
        self.kept = []

    @endpoint
    def keep(self, port):
        self.kept.append(port)

    @endpoint
    def pour(self, port, count):
        for i in range(count):
            port.send(i)

    @endpoint
    def open(self):
        port, self.receiver = Channel.open()
        return port


def test_a_hundred_thousand_values_through_one_channel_arrive_in_order():
    keeper = crown.world_flat().spawn("pourer", Keeper)
    port, receiver = Channel.open()
    count = 100_000
    poured = keeper.slice(ranks=3).pour.call_one(port, count)
    for i in range(count):
        assert receiver.recv().get(timeout=WAIT) == i
    poured.get(timeout=WAIT)
    keeper.stop()


def test_a_channel_hears_at_once_when_an_actor_holding_its_port_stops():
    keeper = crown.world_flat().spawn("keeper", Keeper)
    port, receiver = Channel.open()
    keeper.slice(ranks=2).keep.call_one(port).get(timeout=WAIT)
    with pytest.raises(TimeoutError):
        receiver.recv().get(timeout=0.2)  # held, nothing sent
    start = time.monotonic()
    keeper.stop()
    with pytest.raises(ActorStoppedError):
        receiver.recv().get(timeout=WAIT)
    assert time.monotonic() - start < 2  # no probe interval


def test_a_channel_fails_when_the_actor_that_opened_it_stops():
    keeper = crown.world_flat().spawn("opener", Keeper)
    port = keeper.slice(ranks=1).open.call_one().get(timeout=WAIT)
    port.send("before")  # reaches the keeper's receiver
    keeper.stop()
    port.send("after")  # dropped: the port is gone with its owner, and nothing waits


def test_an_exception_escaping_an_explicit_port_endpoint_kills_the_actor(faults):
    deferred = crown.world_flat().spawn("ported_crash", Deferred)
    start = time.monotonic()
    with pytest.raises(SupervisionError, match="escaped its port") as dead:
        deferred.slice(ranks=1).crash.call_one().get(timeout=WAIT)
    assert time.monotonic() - start < 10
    assert dead.value.rank == 1
    failure = faults.next()
    assert (failure.mesh_name, failure.rank) == ("ported_crash", 1)
    with pytest.raises(SupervisionError):
        deferred.slice(ranks=1).alive.call_one().get(timeout=WAIT)
    # Under call(), the dead member fails the call; the others answered.
    with pytest.raises(SupervisionError, match="escaped its port") as dead:
        deferred.crash.call().get(timeout=WAIT)
    for _ in range(3):
        faults.next()


def test_a_member_that_dies_before_replying_does_not_leave_its_caller_waiting(faults):
    deferred = crown.world_flat().spawn("ported_dies_later", Deferred)
    one = deferred.slice(ranks=2)
    pending = one.ask.call_one(1)  # returns at once; the reply would come later
    gathered = deferred.ask.call(1)
    one.fail.broadcast()  # kills it: it will never reply
    start = time.monotonic()
    with pytest.raises(SupervisionError, match="kills the actor") as dead:
        pending.get(timeout=WAIT)
    assert time.monotonic() - start < 10
    assert dead.value.rank == 2
    assert faults.next().rank == 2
    # The cast's other members still reply; the dead one's error is in place.
    for rank in (0, 1, 3):
        deferred.slice(ranks=rank).answer.call_one(1).get(timeout=WAIT)
    mesh = gathered.value_mesh(timeout=WAIT)
    assert [rank for rank, _ in mesh.errors()] == [2]
    assert isinstance(mesh.errors()[0][1], SupervisionError)


def test_a_member_stopped_before_replying_fails_its_caller_with_actor_stopped():
    deferred = crown.world_flat().spawn("ported_stopped", Deferred)
    pending = deferred.slice(ranks=1).ask.call_one(1)
    deferred.alive.call().get(timeout=WAIT)  # the ask was handled
    deferred.stop()
    with pytest.raises(ActorStoppedError):
        pending.get(timeout=WAIT)


class Meeting(Actor):
    """Concurrent bodies that each wait for the other."""

    def __init__(self):
        self.here = {}
        self.running = 0
        self.peak = 0
        self.log = []
        self.notes = []
        self.ticks = 0

    def _arrive(self, name):
        self.here.setdefault(name, asyncio.Event()).set()

    @concurrent_endpoint
    async def meet(self, me, other):
        self._arrive(me)
        await asyncio.wait_for(self.here.setdefault(other, asyncio.Event()).wait(), 10)
        return f"{me} met {other} on {current_rank().rank}"

    @concurrent_endpoint(max_concurrency=2)
    async def work(self, seconds):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(seconds)
        self.running -= 1
        return self.peak

    @concurrent_endpoint(max_concurrency=1)
    async def hold(self, tag):
        self.notes.append(tag)
        await self.here.setdefault("open", asyncio.Event()).wait()
        return tag

    @endpoint
    async def release_held(self):
        self._arrive("open")

    @concurrent_endpoint
    async def note(self, tag):
        self.notes.append(tag)  # before its first await: the next message sees it
        await asyncio.sleep(30)

    @endpoint
    async def seen(self):
        return list(self.notes)

    @endpoint
    async def step(self, tag):
        self.log.append(("in", tag))
        await asyncio.sleep(0.1)
        self.log.append(("out", tag))

    @endpoint
    async def steps(self):
        return list(self.log)

    @concurrent_endpoint
    async def tick(self):
        while True:
            self.ticks += 1
            await asyncio.sleep(0.01)

    @endpoint
    async def ticked(self):
        return self.ticks

    @concurrent_endpoint
    async def fail(self):
        raise KeyError("forwarded to the caller")

    @concurrent_endpoint(explicit_response_port=True)
    async def fail_unsent(self, port):
        await asyncio.sleep(0.05)
        raise ValueError("a concurrent body that raised past its port")

    @concurrent_endpoint(explicit_response_port=True)
    async def reply_twice(self, port):
        port.send("started")
        await asyncio.sleep(0.05)
        port.send("dropped")

    @concurrent_endpoint(explicit_response_port=True)
    async def wait_for_stop(self, port, path):
        self.path = path
        port.send("started")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            with open(path, "w") as f:
                f.write("cancelled")
            raise

    @concurrent_endpoint
    async def forever(self):
        await asyncio.sleep(60)

    async def __cleanup__(self, exc):
        path = getattr(self, "path", None)
        if path is not None and os.path.exists(path):  # after the tasks' own cancellation
            with open(path, "a") as f:
                f.write(", then cleanup")

    @endpoint
    async def alive(self):
        return current_rank().rank


def test_concurrent_calls_overlap():
    meeting = crown.world_flat().spawn("meeting", Meeting)
    one = meeting.slice(ranks=1)
    first = one.meet.call_one("a", "b")
    second = one.meet.call_one("b", "a")  # could not start if the first held the actor
    assert first.get(timeout=WAIT) == "a met b on 1"
    assert second.get(timeout=WAIT) == "b met a on 1"
    # Over a cast too, and current_rank() is the member's on its loop thread.
    left, right = meeting.meet.call("c", "d"), meeting.meet.call("d", "c")
    assert left.get(timeout=WAIT).values() == [f"c met d on {r}" for r in range(4)]
    assert right.get(timeout=WAIT).values() == [f"d met c on {r}" for r in range(4)]


def test_the_bound_is_respected_and_the_next_call_waits():
    meeting = crown.world_flat().spawn("bounded", Meeting)
    one = meeting.slice(ranks=2)
    start = time.monotonic()
    pending = [one.work.call_one(0.3) for _ in range(6)]
    peaks = [f.get(timeout=WAIT) for f in pending]  # none fails: they waited
    elapsed = time.monotonic() - start
    assert max(peaks) == 2  # two at once, never more
    assert elapsed >= 0.85  # three rounds of 0.3 s


def test_a_call_waiting_for_a_slot_lets_other_messages_in():
    meeting = crown.world_flat().spawn("held", Meeting)
    one = meeting.slice(ranks=3)
    first, second = one.hold.call_one("first"), one.hold.call_one("second")
    assert one.seen.call_one().get(timeout=WAIT) == ["first"]  # the second waits for the slot
    one.release_held.call_one().get(timeout=WAIT)
    assert (first.get(timeout=WAIT), second.get(timeout=WAIT)) == ("first", "second")
    assert one.seen.call_one().get(timeout=WAIT) == ["first", "second"]


def test_a_concurrent_body_starts_before_the_next_message():
    meeting = crown.world_flat().spawn("noted", Meeting)
    one = meeting.slice(ranks=1)
    for tag in ("x", "y", "z"):
        one.note.call_one(tag)
    assert one.seen.call_one().get(timeout=WAIT) == ["x", "y", "z"]
    meeting.stop()  # cancels the sleeping notes


def test_the_loop_runs_between_messages():
    meeting = crown.world_flat().spawn("ticking", Meeting)
    one = meeting.slice(ranks=0)
    one.tick.call_one()
    first = one.ticked.call_one().get(timeout=WAIT)
    time.sleep(0.5)  # no message meanwhile
    assert one.ticked.call_one().get(timeout=WAIT) >= first + 10
    meeting.stop()


def test_ordinary_async_endpoints_stay_one_at_a_time():
    meeting = crown.world_flat().spawn("serial", Meeting)
    one = meeting.slice(ranks=2)
    one.forever.call_one()  # the actor has a loop thread, and a task running on it
    pending = [one.step.call_one(tag) for tag in ("a", "b", "c")]
    for future in pending:
        future.get(timeout=WAIT)
    assert one.steps.call_one().get(timeout=WAIT) == [
        ("in", "a"), ("out", "a"), ("in", "b"), ("out", "b"), ("in", "c"), ("out", "c")]
    meeting.stop()


def test_a_concurrent_body_that_raises_fails_its_call_and_the_actor_lives():
    meeting = crown.world_flat().spawn("forwards", Meeting)
    with pytest.raises(ActorError, match="forwarded to the caller") as raised:
        meeting.slice(ranks=1).fail.call_one().get(timeout=WAIT)
    assert isinstance(raised.value.__cause__, KeyError)
    assert meeting.slice(ranks=1).alive.call_one().get(timeout=WAIT) == 1


def test_an_exception_escaping_a_concurrent_explicit_port_body_kills_the_actor(faults):
    meeting = crown.world_flat().spawn("concurrent_crash", Meeting)
    one = meeting.slice(ranks=3)
    start = time.monotonic()
    with pytest.raises(SupervisionError, match="raised past its port") as dead:
        one.fail_unsent.call_one().get(timeout=WAIT)
    assert time.monotonic() - start < 10
    assert dead.value.rank == 3
    assert faults.next().rank == 3
    with pytest.raises(SupervisionError, match="raised past its port"):
        one.alive.call_one().get(timeout=WAIT)


def test_a_concurrent_explicit_port_reply_counts_once():
    meeting = crown.world_flat().spawn("replies_twice", Meeting)
    assert meeting.reply_twice.call().get(timeout=WAIT).values() == ["started"] * 4


def test_stopping_the_actor_cancels_its_tasks_and_its_callers_hear():
    meeting = crown.world_flat().spawn("stops", Meeting)
    one = meeting.slice(ranks=1)
    path = os.path.join(tempfile.gettempdir(), f"crown-cancelled-{os.getpid()}")
    if os.path.exists(path):
        os.unlink(path)
    assert one.wait_for_stop.call_one(path).get(timeout=WAIT) == "started"
    pending = one.forever.call_one()
    meeting.stop()
    with pytest.raises(ActorStoppedError):
        pending.get(timeout=WAIT)
    deadline = time.monotonic() + WAIT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        with open(path) as f:
            written = f.read()
        if written != "cancelled":
            break
        time.sleep(0.05)
    # As in Monarch, the tasks were cancelled (and saw it) before __cleanup__ ran.
    assert written == "cancelled, then cleanup", written
    os.unlink(path)


class Mixed(Actor):
    @endpoint
    def plain(self):
        return 1

    @endpoint
    async def awaited(self):
        return 2


class MixedConcurrent(Actor):
    @endpoint
    def plain(self):
        return 1

    @concurrent_endpoint
    async def overlapping(self):
        return 2


def test_mixing_sync_and_async_endpoints_is_refused_at_spawn():
    before = crown._crown.python_actors()
    for cls in (Mixed, MixedConcurrent):
        with pytest.raises(TypeError, match="mixes both async and sync endpoints"):
            crown.world_flat().spawn("mixed", cls)
        with pytest.raises(ValueError, match="mixes both async and sync"):  # Monarch's type, text
            crown.world_flat().spawn("mixed", cls)
    assert crown._crown.python_actors() == before  # nothing was spawned here


class Child(Actor):
    @endpoint
    def fail(self):
        raise RuntimeError("the child fails on purpose")


class ConcurrentParent(Actor):
    def __init__(self):
        self.failures = []
        self.children = None

    @concurrent_endpoint
    async def spawn_and_fail(self):
        # On the loop thread: spawn still records this actor as the owner.
        self.children = crown.world_flat().spawn("concurrent_children", Child)
        self.children.slice(ranks=1).fail.broadcast()
        return crown.actor.current_actor_name()

    async def __supervise__(self, failure):
        self.failures.append(failure.rank)
        return True

    @endpoint
    async def seen(self):
        return list(self.failures)


def test_a_mesh_spawned_on_the_loop_thread_is_owned_by_the_actor(faults):
    parent = crown.world_flat().spawn("concurrent_parent", ConcurrentParent).slice(ranks=2)
    assert parent.spawn_and_fail.call_one().get(timeout=WAIT).startswith("concurrent_parent{")
    deadline = time.monotonic() + WAIT
    while parent.seen.call_one().get(timeout=WAIT) != [1]:
        assert time.monotonic() < deadline, "the owner did not hear of its child's death"
        time.sleep(0.05)
    assert faults.empty()  # not the controller's
