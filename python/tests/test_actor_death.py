"""Actor death and supervision (design.md's failure model, Monarch's rules).

An actor dies when an endpoint with no caller raises (a broadcast) or when a
BaseException such as SystemExit escapes any endpoint; a dead actor refuses
every message with SupervisionError naming the cause, and the owner of its
mesh hears: an actor's __supervise__, or the controller's
crown.actor.unhandled_fault_hook. An ordinary exception under a call fails
only that call.
"""

import time

import pytest

import crown
import crown.actor
from crown.actor import Actor, endpoint
from crown.actor import SupervisionError

WAIT = 20  # seconds: a failure report crosses two ranks at most


def _first_seen(parent):
    """parent.seen() once it has seen something (a report crosses ranks), or []."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        seen = parent.seen.call_one().get(timeout=WAIT)
        if seen:
            return seen
        time.sleep(0.1)
    return []


class Member(Actor):
    def __init__(self):
        self.handled = 0

    @endpoint
    def work(self, fail_on=None):
        self.handled += 1
        if fail_on is not None and crown.actor.current_rank().rank == fail_on:
            raise ValueError(f"member {fail_on} gives up")
        return self.handled

    @endpoint
    def leave(self):
        raise SystemExit(3)

    @endpoint
    def raise_plainly(self):
        raise KeyError("only this call")


class Parent(Actor):
    """Owns a child mesh on every rank; how it supervises is its argument."""

    def __init__(self, verdict):
        self.verdict = verdict
        self.failures = []
        self.children = None

    @endpoint
    def spawn_children(self, name):
        self.children = crown.world_flat().spawn(name, Member)
        return len(self.children)

    @endpoint
    def fail_child(self, rank):
        self.children.work.broadcast(fail_on=rank)

    @endpoint
    def seen(self):
        return [(f.mesh_name, f.rank, f.report()) for f in self.failures]

    def __supervise__(self, failure):
        self.failures.append(failure)
        if self.verdict == "raise":
            raise RuntimeError("supervisor overwhelmed")
        return self.verdict == "handle"


class AsyncParent(Parent):
    async def __supervise__(self, failure):
        self.failures.append(failure)
        return True


def test_a_raising_broadcast_kills_that_member_and_its_owner_hears(faults):
    members = crown.world_flat().spawn("dies_on_broadcast", Member)
    members.work.broadcast(fail_on=2)
    failure = faults.next()
    assert failure.mesh_name == "dies_on_broadcast"
    assert failure.rank == 2
    assert "member 2 gives up" in failure.cause and "ValueError" in failure.cause
    assert failure.mesh.size() == 4
    assert "rank 2" in failure.report()
    # Monarch's sentences lead (programs match on them), crown's account follows.
    assert failure.report().startswith(
        "The actor dies_on_broadcast and all its descendants have failed: "), failure.report()
    with pytest.raises(SupervisionError) as dead:
        members.slice(ranks=2).work.call_one().get(timeout=WAIT)
    assert str(dead.value).startswith(
        "Endpoint call dies_on_broadcast.work() failed, The actor dies_on_broadcast and all its "
        "descendants have failed: "), str(dead.value)
    assert dead.value.rank == 2
    assert (dead.value.actor, dead.value.endpoint) == ("dies_on_broadcast", "work")
    assert "member 2 gives up" in dead.value.cause
    # The others live on, each having handled the broadcast and this call.
    assert members.slice(ranks=slice(0, 2)).work.call().get(timeout=WAIT).values() == [2, 2]
    assert members.slice(ranks=3).work.call_one().get(timeout=WAIT) == 2
    assert faults.empty()


def test_a_call_queued_behind_the_fatal_message_is_refused_with_the_cause(faults):
    members = crown.world_flat().spawn("queued_behind", Member)
    one = members.slice(ranks=1)
    one.work.broadcast(fail_on=1)
    queued = [one.work.call_one() for _ in range(20)]
    for future in queued:
        with pytest.raises(SupervisionError, match="member 1 gives up"):
            future.get(timeout=WAIT)
    assert faults.next().rank == 1


def test_system_exit_in_a_call_kills_the_actor_and_the_call_says_so(faults):
    members = crown.world_flat().spawn("exits", Member)
    with pytest.raises(SupervisionError, match="SystemExit") as dead:
        members.slice(ranks=3).leave.call_one().get(timeout=WAIT)
    assert dead.value.rank == 3
    assert faults.next().rank == 3
    with pytest.raises(SupervisionError, match="SystemExit"):
        members.slice(ranks=3).work.call_one().get(timeout=WAIT)


def test_an_ordinary_exception_under_a_call_fails_only_that_call(faults):
    members = crown.world_flat().spawn("lives_on", Member)
    one = members.slice(ranks=1)
    with pytest.raises(crown.actor.ActorError, match="only this call"):
        one.raise_plainly.call_one().get(timeout=WAIT)
    assert one.work.call_one().get(timeout=WAIT) == 1
    assert faults.none_within(1)


@pytest.mark.parametrize("cls", [Parent, AsyncParent])
def test_a_supervise_that_handles_keeps_the_owner_alive(faults, cls):
    parent = crown.world_flat().slice(ranks=1).spawn(f"parent_{cls.__name__}", cls, "handle")
    assert parent.spawn_children.call_one(f"children_{cls.__name__}").get(timeout=WAIT) == 4
    parent.fail_child.call_one(3).get(timeout=WAIT)
    seen = _first_seen(parent)
    assert len(seen) == 1, seen
    name, rank, report = seen[0]
    assert (name, rank) == (f"children_{cls.__name__}", 3)
    assert "member 3 gives up" in report
    assert faults.none_within(1)  # handled below: the controller never hears


@pytest.mark.parametrize("verdict, says", [("pass", "did not handle"),
                                           ("raise", "supervisor overwhelmed")])
def test_an_unhandled_failure_kills_the_owner_and_goes_up(faults, verdict, says):
    parent = crown.world_flat().slice(ranks=2).spawn(f"parent_{verdict}", Parent, verdict)
    parent.spawn_children.call_one(f"children_{verdict}").get(timeout=WAIT)
    parent.fail_child.call_one(0).get(timeout=WAIT)
    failure = faults.next()
    assert failure.mesh_name == f"parent_{verdict}"
    assert failure.rank == 2
    assert says in failure.cause
    assert "member 0 gives up" in failure.cause  # caused by the child's failure
    with pytest.raises(SupervisionError):
        parent.seen.call_one().get(timeout=WAIT)


class BadInit(Actor):
    def __init__(self):
        if crown.actor.current_rank().rank == 1:
            raise ValueError("no GPU on this rank")

    @endpoint
    def ping(self):
        return "pong"


def test_an_init_failure_is_supervised_and_reads_as_a_python_traceback(faults):
    bad = crown.world_flat().spawn("bad_init", BadInit)  # returns at once
    failure = faults.next()
    assert (failure.mesh_name, failure.rank) == ("bad_init", 1)
    for text in (failure.cause, failure.report()):
        assert "Traceback (most recent call last)" in text
        assert "ValueError: no GPU on this rank" in text
        for cxx in ("crown::", "std::", "PyActor", "basic_string"):
            assert cxx not in text, text
    with pytest.raises(SupervisionError, match="no GPU on this rank") as dead:
        bad.slice(ranks=1).ping.call_one().get(timeout=WAIT)
    assert dead.value.cause == failure.cause
    assert bad.slice(ranks=2).ping.call_one().get(timeout=WAIT) == "pong"
    assert faults.empty()


class SpawnsBadChildren(Actor):
    def __init__(self):
        self.failures = []

    @endpoint
    def spawn_children(self):
        self.children = crown.world_flat().spawn("bad_children", BadInit)
        return True

    @endpoint
    def seen(self):
        return [(f.mesh_name, f.rank) for f in self.failures]

    def __supervise__(self, failure):
        self.failures.append(failure)
        return True


def test_an_init_failure_goes_to_the_spawning_actors_supervise(faults):
    parent = crown.world_flat().slice(ranks=3).spawn("bad_parent", SpawnsBadChildren)
    assert parent.spawn_children.call_one().get(timeout=WAIT)
    seen = _first_seen(parent)
    assert seen == [("bad_children", 1)]
    assert faults.empty()
