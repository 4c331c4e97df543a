"""The owner of a mesh hears of its members' deaths whatever context spawned
it (issue 44, defect 1): an actor's __init__, an endpoint, a concurrent
endpoint's task, a thread the actor started. With a __supervise__ that
handles it the owner lives on; without one it dies of it and its own owner
hears, up to the controller's fault hook. 6 ranks under mpirun
--enable-recovery: the tests that kill a process take ranks 5, 4 and 3,
one each, and run last; the others stay on ranks 0..2."""

import asyncio
import os
import signal
import threading
import time

import pytest

import crown
from crown.actor import (Actor, ActorStoppedError, SupervisionError, concurrent_endpoint,
                         endpoint)

WAIT = 20


def _ranks(*ranks):
    return crown.world_flat().slice(ranks=slice(ranks[0], ranks[-1] + 1))


class Child(Actor):
    def __init__(self, grandchild_ranks=None):
        self.children = None
        self.grandchild_ranks = grandchild_ranks
        self.heard = []

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def crack(self):
        raise ValueError("child cracked")

    @endpoint
    def spawn_grandchildren(self):
        """Depth 3: this member's endpoint spawns a mesh of its own."""
        self.children = _ranks(*self.grandchild_ranks).spawn("grandchildren", Child)
        return self.children.pid.call().get(timeout=WAIT).values()

    @endpoint
    def crack_a_grandchild(self):
        self.children.crack.broadcast()

    @endpoint
    def heard_of(self):
        return [(failure.mesh_name, failure.rank, failure.cause) for failure in self.heard]


class SupervisingChild(Child):
    def __supervise__(self, failure):
        self.heard.append(failure)
        return True


class Parent(Actor):
    """Spawns mesh "children" on `ranks` in context `where`, and hears of it
    through __supervise__ (subclass Unsupervised has none)."""

    def __init__(self, where, ranks, child=Child, child_args=()):
        self.where, self.ranks = where, ranks
        self.child, self.child_args = child, child_args
        self.heard = []
        self.children = None
        self.mesh_name = f"children-{where}"
        if where == "init":
            self.children = self._spawn()

    def _spawn(self):
        return _ranks(*self.ranks).spawn(self.mesh_name, self.child, *self.child_args)

    @endpoint
    def spawn_children(self):
        if self.where == "endpoint":
            self.children = self._spawn()
        elif self.where == "thread":
            spawned = []
            thread = threading.Thread(target=lambda: spawned.append(self._spawn()))
            thread.start()
            thread.join()
            self.children = spawned[0]
        return self.children.pid.call().get(timeout=WAIT).values()

    @endpoint
    def children_mesh(self):
        return self.children

    @endpoint
    def crack_a_child(self, index):
        self.children.slice(ranks=index).crack.broadcast()

    @endpoint
    def heard_of(self):
        return [(failure.mesh_name, failure.rank, failure.cause) for failure in self.heard]

    def __supervise__(self, failure):
        self.heard.append(failure)
        return True


class Unsupervised(Parent):
    __supervise__ = None  # no __supervise__: it dies of its mesh's failure


class AsyncParent(Actor):
    """The task context: a concurrent endpoint's body spawns after its first
    await, on the actor's loop thread."""

    def __init__(self, ranks):
        self.ranks = ranks
        self.heard = []
        self.children = None

    @concurrent_endpoint
    async def spawn_children(self):
        await asyncio.sleep(0.01)
        self.children = _ranks(*self.ranks).spawn("children-task", Child)
        return self.children.pid.call().get(timeout=WAIT).values()

    @endpoint
    async def crack_a_child(self, index):
        self.children.slice(ranks=index).crack.broadcast()

    @endpoint
    async def heard_of(self):
        return [(failure.mesh_name, failure.rank, failure.cause) for failure in self.heard]

    async def __supervise__(self, failure):
        self.heard.append(failure)
        return True


def _heard(owner, count, within=WAIT):
    """What `owner` heard once it has `count` reports, or after `within` s."""
    deadline = time.monotonic() + within
    while True:
        heard = owner.heard_of.call_one().get(timeout=WAIT)
        if len(heard) >= count or time.monotonic() > deadline:
            return heard
        time.sleep(0.05)


def _spawn_parent(name, cls, *args):
    parent = crown.world_flat().slice(ranks=0).spawn(name, cls, *args)
    return parent


@pytest.mark.parametrize("where", ["init", "endpoint", "thread", "task"])
def test_the_owner_hears_a_member_that_raises_under_broadcast(where, faults):
    if where == "task":
        parent = _spawn_parent("parent-task", AsyncParent, (1, 2))
    else:
        parent = _spawn_parent(f"parent-{where}", Parent, where, (1, 2))
    assert len(parent.spawn_children.call_one().get(timeout=WAIT)) == 2
    parent.crack_a_child.call_one(1).get(timeout=WAIT)  # the member on rank 2
    heard = _heard(parent, 1)
    assert [(name, rank) for name, rank, _ in heard] == [(f"children-{where}", 2)], heard
    assert "ValueError: child cracked" in heard[0][2], heard[0][2]
    # Handled: the owner lives on, and nothing reaches the controller.
    assert faults.none_within(0.5)
    assert len(_heard(parent, 2, within=1.0)) == 1  # and no second report
    parent.stop().get(timeout=WAIT)


@pytest.mark.parametrize("where", ["init", "endpoint", "thread"])
def test_an_owner_without_supervise_dies_of_it_and_the_controller_hears(where, faults):
    parent = _spawn_parent(f"unsupervised-{where}", Unsupervised, where, (1, 2))
    assert len(parent.spawn_children.call_one().get(timeout=WAIT)) == 2
    parent.crack_a_child.call_one(0).get(timeout=WAIT)  # the member on rank 1
    failure = faults.of(f"unsupervised-{where}")
    assert failure.rank == 0, failure.report()
    assert "Unsupervised has no __supervise__" in failure.cause, failure.cause
    assert f"actor mesh 'children-{where}': the member on rank 1" in failure.cause
    assert "ValueError: child cracked" in failure.cause
    with pytest.raises(SupervisionError):
        parent.heard_of.call_one().get(timeout=WAIT)  # the owner died of it


class FailingChild(Actor):
    def __init__(self):
        raise RuntimeError("born broken")

    @endpoint
    def pid(self):
        return os.getpid()


class SlowParent(Parent):
    """Its __init__ spawns children that fail at once, then lingers, so their
    reports arrive while it is still being constructed."""

    def __init__(self, ranks):
        super().__init__("init", ranks, FailingChild)
        time.sleep(1.0)


def test_reports_for_an_owner_still_in_its_init_wait_for_it(faults):
    parent = _spawn_parent("slow-parent", SlowParent, (1, 2))
    heard = _heard(parent, 2)
    assert sorted((name, rank) for name, rank, _ in heard) == [
        ("children-init", 1), ("children-init", 2)], heard
    assert all("RuntimeError: born broken" in cause for _, _, cause in heard), heard
    assert faults.none_within(0.5)
    parent.stop().get(timeout=WAIT)


class SlowFailingParent(Parent):
    """As SlowParent, but its __init__ then raises: it never supervised."""

    def __init__(self, ranks):
        super().__init__("init", ranks, FailingChild)
        time.sleep(1.0)
        raise RuntimeError("parent born broken")


def test_reports_for_an_owner_whose_init_then_fails_go_up_with_its_death(faults):
    _spawn_parent("failing-parent", SlowFailingParent, (1, 2))
    failure = faults.of("failing-parent")
    assert "RuntimeError: parent born broken" in failure.cause, failure.cause
    for rank in (1, 2):
        assert (f"it died before it could supervise its mesh 'children-init': actor mesh "
                f"'children-init': the member on rank {rank}") in failure.cause, failure.cause


def test_stopping_an_owner_stops_the_mesh_its_init_spawned():
    parent = _spawn_parent("stopped-parent", Parent, "init", (1, 2))
    children = parent.children_mesh.call_one().get(timeout=WAIT)
    assert len(children.pid.call().get(timeout=WAIT)) == 2
    parent.stop().get(timeout=WAIT)
    with pytest.raises(ActorStoppedError):
        children.pid.call().get(timeout=WAIT)


def test_a_spawn_from_a_thread_crown_does_not_know_on_a_worker_is_refused():
    worker = crown.world_flat().slice(ranks=1).spawn("stranger-spawner", Stranger)
    message = worker.spawn_from_a_stranger.call_one().get(timeout=WAIT)
    assert "no actor to own it" in message, message


class Stranger(Actor):
    @endpoint
    def spawn_from_a_stranger(self):
        # A thread that crown never saw start (threading.Thread is wrapped,
        # _thread.start_new_thread is not): it acts for nobody.
        import _thread

        said = []
        done = threading.Event()

        def body():
            try:
                crown.world_flat().slice(ranks=2).spawn("orphan", Child)
                said.append("spawned")
            except Exception as error:  # noqa: BLE001 - reported to the test
                said.append(str(error))
            done.set()

        _thread.start_new_thread(body, ())
        assert done.wait(WAIT)
        return said[0]


def test_depth_3_with_no_supervise_anywhere_the_controller_hears(faults):
    # controller -> A (rank 0, no __supervise__) whose __init__ spawns B
    # (rank 1, none either), whose endpoint spawns C (rank 2); C raises
    # under broadcast: B dies of it, then A, and the controller's hook hears.
    a = _spawn_parent("depth3-none", Unsupervised, "init", (1,), Child, ((2,),))
    b = a.children_mesh.call_one().get(timeout=WAIT)
    assert len(b.spawn_grandchildren.call_one().get(timeout=WAIT)) == 1
    b.crack_a_grandchild.call_one().get(timeout=WAIT)
    failure = faults.of("depth3-none")
    assert failure.rank == 0, failure.report()
    assert "Unsupervised has no __supervise__" in failure.cause, failure.cause
    assert "Child has no __supervise__" in failure.cause, failure.cause
    assert "actor mesh 'grandchildren': the member on rank 2" in failure.cause
    assert "ValueError: child cracked" in failure.cause


# Last: the tests that kill a process, each its own rank (5, 4, 3).

def test_a_sigkilled_member_of_a_mesh_spawned_in_init_is_heard(faults):
    parent = _spawn_parent("parent-init-killed", Parent, "init", (5,))
    (pid,) = parent.spawn_children.call_one().get(timeout=WAIT)
    os.kill(pid, signal.SIGKILL)
    heard = _heard(parent, 1)
    assert [(name, rank) for name, rank, _ in heard] == [("children-init", 5)], heard
    assert "its process was lost" in heard[0][2], heard
    parent.stop().get(timeout=WAIT)


def test_depth_3_the_middle_owner_hears_a_killed_grandchild(faults):
    # controller -> A (rank 0) whose __init__ spawns B (rank 1), whose
    # endpoint spawns C (rank 4); C's process is killed: B.__supervise__ hears.
    a = _spawn_parent("depth3-a", Parent, "init", (1,), SupervisingChild, ((4,),))
    (b,) = [a.children_mesh.call_one().get(timeout=WAIT)]
    (pid,) = b.spawn_grandchildren.call_one().get(timeout=WAIT)
    os.kill(pid, signal.SIGKILL)
    heard = _heard(b, 1)
    assert [(name, rank) for name, rank, _ in heard] == [("grandchildren", 4)], heard
    assert "its process was lost" in heard[0][2], heard
    assert _heard(a, 0) == []  # handled below it
    a.stop().get(timeout=WAIT)


def test_depth_3_an_unsupervising_middle_owner_dies_and_the_top_owner_hears(faults):
    # The same, B without __supervise__: B dies of it, and A hears.
    a = _spawn_parent("depth3-a2", Parent, "init", (2,), Child, ((3,),))
    b = a.children_mesh.call_one().get(timeout=WAIT)
    (pid,) = b.spawn_grandchildren.call_one().get(timeout=WAIT)
    os.kill(pid, signal.SIGKILL)
    heard = _heard(a, 1)
    assert [(name, rank) for name, rank, _ in heard] == [("children-init", 2)], heard
    assert "Child has no __supervise__" in heard[0][2], heard
    assert "actor mesh 'grandchildren': the member on rank 3" in heard[0][2], heard
    assert "its process was lost" in heard[0][2], heard
    with pytest.raises(SupervisionError):
        b.pid.call_one().get(timeout=WAIT)
    a.stop().get(timeout=WAIT)
