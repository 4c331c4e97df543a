"""A lost process is a supervision event (Monarch's rule), under mpirun
--enable-recovery with 3 ranks: the owner of a mesh with a member on it
hears once, an actor through its __supervise__, the controller through its
fault hook, with how the process went."""

import os
import signal
import time

import crown
from crown.actor import Actor, SupervisionError, endpoint

WAIT = 20


class Child(Actor):
    @endpoint
    def pid(self):
        return os.getpid()


class Supervisor(Actor):
    def __init__(self):
        self.heard = []
        self.children = None

    @endpoint
    def spawn_on(self, rank):
        self.children = crown.world_flat().slice(ranks=rank).spawn("supervised", Child)
        return self.children.pid.call_one().get(timeout=WAIT)

    @endpoint
    def heard_of(self):
        return [(failure.mesh_name, failure.rank, failure.cause) for failure in self.heard]

    def __supervise__(self, failure):
        self.heard.append(failure)
        return True


def _heard(supervisor, count):
    deadline = time.monotonic() + WAIT
    while True:
        heard = supervisor.heard_of.call_one().get(timeout=WAIT)
        if len(heard) >= count or time.monotonic() > deadline:
            return heard
        time.sleep(0.05)


def test_an_owning_actor_hears_through_supervise_and_the_controller_through_its_hook(faults):
    supervisor = crown.world_flat().slice(ranks=0).spawn("supervisor", Supervisor)
    pid = supervisor.spawn_on.call_one(2).get(timeout=WAIT)
    everyone = crown.world_flat().spawn("everyone", Child)  # owned by the controller
    assert len(everyone.pid.call().get(timeout=WAIT)) == 3
    os.kill(pid, signal.SIGKILL)
    heard = _heard(supervisor, 1)
    assert [(name, rank) for name, rank, _ in heard] == [("supervised", 2)], heard
    assert "its process was lost" in heard[0][2] and "no last words" in heard[0][2], heard
    failure = faults.of("everyone")
    assert failure.rank == 2 and failure.host, failure.report()
    # Once each: the supervisor handled it (returned true), so nothing goes up,
    # and the controller hears of its own mesh only.
    assert faults.none_within(0.5)
    assert len(_heard(supervisor, 2)) == 1
    # The survivors of the controller's mesh serve on.
    assert len(everyone.survivors().pid.call().get(timeout=WAIT)) == 2
    try:
        everyone.pid.call().get(timeout=WAIT)
        raise AssertionError("the lost member answered")
    except SupervisionError as lost:
        assert "rank 2" in str(lost)
