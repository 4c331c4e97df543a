"""Stopping meshes (Monarch's lifecycle): ActorMesh.stop and ProcMesh.stop
return awaitable futures; each member's __cleanup__ runs at stop (exc None)
or at its death (exc what killed it), after the meshes it spawned have
stopped; later calls and spawns fail clearly."""

import asyncio

import pytest

import crown
import crown.actor
from crown.actor import Actor, ActorStoppedError, Channel, endpoint

WAIT = 20


class Tidy(Actor):
    """Tells `port` what its __cleanup__ saw: (label, rank, exc)."""

    def __init__(self, port, label):
        self.port, self.label = port, label
        self.children = None

    @endpoint
    def rank(self):
        return crown.actor.current_rank().rank

    @endpoint
    def spawn_children(self, name):
        self.children = crown.world_flat().spawn(name, Tidy, self.port, "child")
        return len(self.children)

    @endpoint
    def crack(self):
        raise ValueError("cracked")

    def __cleanup__(self, exc):
        self.port.send((self.label, crown.actor.current_rank().rank,
                        None if exc is None else repr(exc)))


class AsyncTidy(Actor):
    def __init__(self, port):
        self.port = port

    @endpoint
    async def rank(self):
        return crown.actor.current_rank().rank

    async def __cleanup__(self, exc):
        await asyncio.sleep(0.01)
        self.port.send(("async", crown.actor.current_rank().rank, exc))


class AsyncCleanupOfSyncEndpoints(Tidy):
    async def __cleanup__(self, exc):
        pass


class PlainCleanupOfAsyncEndpoints(AsyncTidy):
    def __cleanup__(self, exc):
        pass


class Messy(Tidy):
    def __cleanup__(self, exc):
        raise RuntimeError("cleanup went wrong")


def _drain(receiver, count):
    """`count` values, then nothing more. The members hold the channel's port
    (from their __init__), so it also hears each one stop or die, as an
    error item (test_endpoints): not a value, skipped here."""
    seen = []
    while len(seen) < count:
        try:
            seen.append(receiver.recv().get(timeout=WAIT))
        except (ActorStoppedError, crown.actor.SupervisionError):
            continue
    while True:
        try:
            extra = receiver.recv().get(timeout=0.5)
        except TimeoutError:
            return seen
        except (ActorStoppedError, crown.actor.SupervisionError):
            continue
        raise AssertionError(f"a value past the {count} expected: {extra!r}")


def test_stop_runs_cleanup_on_every_member_and_later_calls_fail():
    port, receiver = Channel.open()
    tidy = crown.world_flat().spawn("tidy", Tidy, port, "tidy")
    stopped = tidy.stop()
    assert stopped.get(timeout=WAIT) is None
    assert sorted(_drain(receiver, 4)) == [("tidy", r, None) for r in range(4)]
    with pytest.raises(ActorStoppedError):
        tidy.rank.call().get(timeout=WAIT)


def test_await_stop_and_async_cleanup():
    port, receiver = Channel.open()
    tidy = crown.world_flat().slice(ranks=slice(1, 3)).spawn("async_tidy", AsyncTidy, port)

    async def stop():
        await tidy.stop()

    asyncio.run(stop())
    assert sorted(_drain(receiver, 2)) == [("async", 1, None), ("async", 2, None)]


def test_stopping_an_actor_stops_the_meshes_it_spawned_first():
    port, receiver = Channel.open()
    parent = crown.world_flat().slice(ranks=2).spawn("parent", Tidy, port, "parent")
    assert parent.spawn_children.call_one("children").get(timeout=WAIT) == 4
    parent.stop().get(timeout=WAIT)
    seen = _drain(receiver, 5)
    assert seen[-1] == ("parent", 2, None)  # after every child's
    assert sorted(seen[:-1]) == [("child", r, None) for r in range(4)]


def test_a_dying_actor_cleans_up_with_what_killed_it(faults):
    port, receiver = Channel.open()
    tidy = crown.world_flat().spawn("dies_tidily", Tidy, port, "dying")
    tidy.slice(ranks=3).crack.broadcast()
    assert _drain(receiver, 1) == [("dying", 3, "ValueError('cracked')")]
    assert faults.next().rank == 3
    tidy.stop().get(timeout=WAIT)  # the dead member counts as stopped
    assert sorted(_drain(receiver, 3)) == [("dying", r, None) for r in range(3)]


def test_a_cleanup_of_another_kind_than_the_endpoints_is_refused_at_spawn():
    # Monarch's rule: __cleanup__ runs where the endpoints do.
    with pytest.raises(ValueError, match="sync endpoints .* but an async __cleanup__"):
        crown.world_flat().spawn("wrong_cleanup", AsyncCleanupOfSyncEndpoints, None, "x")
    with pytest.raises(ValueError, match="async endpoints .* but a plain __cleanup__"):
        crown.world_flat().spawn("wrong_cleanup", PlainCleanupOfAsyncEndpoints, None)


def test_a_failing_cleanup_is_a_supervision_event_and_the_stop_completes(faults):
    port, _ = Channel.open()
    messy = crown.world_flat().spawn("messy", Messy, port, "messy")
    assert messy.stop().get(timeout=WAIT) is None
    # As in Monarch, a raise in __cleanup__ is a failure its owner hears, once per member.
    failures = [faults.of("messy") for _ in range(4)]
    assert sorted(failure.rank for failure in failures) == [0, 1, 2, 3]
    for failure in failures:
        assert "__cleanup__ of Messy raised RuntimeError: cleanup went wrong" in failure.cause
    with pytest.raises((ActorStoppedError, crown.actor.SupervisionError)):
        messy.rank.call().get(timeout=WAIT)


def test_a_cleanup_that_fails_as_its_actor_dies_is_chained_to_the_cause(faults):
    port, _ = Channel.open()
    messy = crown.world_flat().spawn("messy_dying", Messy, port, "messy")
    messy.slice(ranks=1).crack.broadcast()
    failure = faults.of("messy_dying")
    assert failure.rank == 1
    assert "ValueError: cracked" in failure.cause, failure.cause
    assert "__cleanup__ of Messy raised RuntimeError: cleanup went wrong" in failure.cause
    messy.slice(ranks=0).stop().get(timeout=WAIT)  # the rest: each cleanup fails and is heard
    assert faults.of("messy_dying").rank == 0


def test_proc_mesh_stop_stops_its_meshes_and_refuses_spawns():
    port, receiver = Channel.open()
    procs = crown.world_flat().slice(ranks=slice(0, 2))
    first = procs.spawn("first", Tidy, port, "first")
    second = procs.slice(ranks=1).spawn("second", Tidy, port, "second")
    elsewhere = crown.world_flat().slice(ranks=slice(2, 4)).spawn("elsewhere", Tidy, port, "x")
    assert procs.stop().get(timeout=WAIT) is None
    assert sorted(_drain(receiver, 3)) == [("first", 0, None), ("first", 1, None),
                                           ("second", 1, None)]
    for mesh in (first, second):
        with pytest.raises(ActorStoppedError):
            mesh.rank.call().get(timeout=WAIT)
    with pytest.raises(RuntimeError, match="was stopped"):
        procs.spawn("again", Tidy, port, "again")
    with pytest.raises(RuntimeError, match="was stopped"):
        procs.slice(ranks=0).spawn("again", Tidy, port, "again")
    assert elsewhere.rank.call().get(timeout=WAIT).values() == [2, 3]
    # The processes live on: a new ProcMesh over the same ranks spawns.
    again = crown.world_flat().slice(ranks=slice(0, 2)).spawn("again", Tidy, port, "again")
    assert again.rank.call().get(timeout=WAIT).values() == [0, 1]


def test_stopping_a_slice_leaves_disjoint_slices_and_the_parent_spawning():
    # Issue 44, defect 3: stopping procs 1..2 stopped every slice of the mesh.
    port, receiver = Channel.open()
    procs = crown.world_flat()
    whole = procs.spawn("whole", Tidy, port, "whole")
    procs.slice(ranks=slice(1, 3)).stop().get(timeout=WAIT)
    assert sorted(_drain(receiver, 2)) == [("whole", 1, None), ("whole", 2, None)]
    # A disjoint slice and a slice of the parent outside the stopped ranks spawn and serve.
    three = procs.slice(ranks=3).spawn("three", Tidy, port, "three")
    assert three.rank.call_one().get(timeout=WAIT) == 3
    zero = procs.slice(ranks=0).spawn("zero", Tidy, port, "zero")
    assert zero.rank.call_one().get(timeout=WAIT) == 0
    # The mesh spawned on the whole keeps serving on the ranks not stopped.
    assert whole.slice(ranks=0).rank.call_one().get(timeout=WAIT) == 0
    assert whole.slice(ranks=3).rank.call_one().get(timeout=WAIT) == 3
    with pytest.raises(ActorStoppedError):
        whole.slice(ranks=1).rank.call_one().get(timeout=WAIT)
    # The parent names exactly the stopped ranks.
    with pytest.raises(RuntimeError, match=r"was stopped on ranks \[1, 2\]"):
        procs.spawn("again", Tidy, port, "again")
    for mesh in (three, zero, whole.slice(ranks=0), whole.slice(ranks=3)):
        mesh.stop().get(timeout=WAIT)
    assert len(_drain(receiver, 4)) == 4


def test_stopping_nested_slices():
    port, receiver = Channel.open()
    procs = crown.world_flat()
    outer = procs.slice(ranks=slice(0, 3))
    mesh = outer.spawn("nested", Tidy, port, "nested")
    inner = outer.slice(ranks=slice(1, 3))  # ranks 1 and 2 (a slice indexes its own dimension)
    inner.slice(ranks=1).stop().get(timeout=WAIT)  # the innermost first: only rank 2
    assert _drain(receiver, 1) == [("nested", 2, None)]
    assert mesh.slice(ranks=slice(0, 2)).rank.call().get(timeout=WAIT).values() == [0, 1]
    assert inner.slice(ranks=0).spawn("n1", Tidy, port, "n1").rank.call_one().get(
        timeout=WAIT) == 1
    inner.stop().get(timeout=WAIT)  # then its parent slice: rank 1's members, rank 2 again harmless
    assert sorted(_drain(receiver, 2)) == [("n1", 1, None), ("nested", 1, None)]
    assert mesh.slice(ranks=0).rank.call_one().get(timeout=WAIT) == 0
    assert outer.slice(ranks=0).spawn("n0", Tidy, port, "n0").rank.call_one().get(
        timeout=WAIT) == 0
    with pytest.raises(RuntimeError, match=r"was stopped on ranks \[1, 2\]"):
        outer.spawn("again", Tidy, port, "again")
    with pytest.raises(RuntimeError, match=r"was stopped on ranks \[2\]"):
        inner.slice(ranks=1).spawn("again", Tidy, port, "again")
    outer.stop().get(timeout=WAIT)  # the rest: rank 0's two members
    assert sorted(_drain(receiver, 2)) == [("n0", 0, None), ("nested", 0, None)]
    # Rank 3 was never in any stopped slice.
    assert procs.slice(ranks=3).spawn("n3", Tidy, port, "n3").rank.call_one().get(
        timeout=WAIT) == 3


def test_a_slice_overlapping_a_stopped_one_fails_only_for_the_stopped_members():
    port, receiver = Channel.open()
    procs = crown.world_flat()
    world_mesh = procs.spawn("overlap", Tidy, port, "overlap")
    procs.slice(ranks=slice(1, 3)).stop().get(timeout=WAIT)
    assert sorted(_drain(receiver, 2)) == [("overlap", 1, None), ("overlap", 2, None)]
    overlapping = procs.slice(ranks=slice(2, 4))
    with pytest.raises(RuntimeError, match=r"was stopped on ranks \[2\]"):
        overlapping.spawn("over", Tidy, port, "over")
    # Its member outside the stopped slice spawns; the mesh over the overlap
    # serves on rank 3 and refuses on rank 2 only.
    assert overlapping.slice(ranks=1).spawn("o3", Tidy, port, "o3").rank.call_one().get(
        timeout=WAIT) == 3
    answers = world_mesh.rank.call().value_mesh(timeout=WAIT)
    assert [rank for rank, _ in answers.errors()] == [1, 2]
    assert all(isinstance(error, ActorStoppedError) for _, error in answers.errors())
    assert world_mesh.slice(ranks=slice(2, 4)).slice(ranks=1).rank.call_one().get(
        timeout=WAIT) == 3
    # Stopping the overlapping slice stops what is left there (rank 3), not rank 0.
    overlapping.stop().get(timeout=WAIT)
    assert sorted(_drain(receiver, 2)) == [("o3", 3, None), ("overlap", 3, None)]
    assert world_mesh.slice(ranks=0).rank.call_one().get(timeout=WAIT) == 0
    world_mesh.slice(ranks=0).stop().get(timeout=WAIT)
    assert _drain(receiver, 1) == [("overlap", 0, None)]


def test_run_refuses_an_unknown_controller_placement():
    with pytest.raises(ValueError, match="controller='shared'"):
        crown.run(lambda: None, controller="bogus")  # refused before anything runs
