"""A process killed in the middle of a call (mpirun --enable-recovery -n 4):
the caller gets SupervisionError naming the rank and host, the controller
keeps running, and calls to the surviving actors still work."""

import ctypes
import os
import pickle
import signal
import time

import pytest

import crown
from crown.actor import Actor, SupervisionError, current_rank, endpoint


HEARTBEAT_BOUND_S = 5  # the default: CROWN_HEARTBEAT_INTERVAL_MS x CROWN_HEARTBEAT_MISSES

class Sleeper(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def fork_a_child_that_dies(self):
        # The child inherits crown's fatal-signal handlers (and the pipe to
        # this process's notice thread); it must not speak for this process
        # (src/bootstrap/departure.cpp).
        child = os.fork()
        if child == 0:
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(1)
        for _ in range(500):
            if os.waitpid(child, os.WNOHANG)[0] == child:
                return True
            time.sleep(0.01)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        return False

    @endpoint
    def nap(self, seconds):
        time.sleep(seconds)
        return current_rank().rank


def test_a_killed_process_raises_supervision_error_and_survivors_serve(faults):
    sleepers = crown.world().spawn("sleeper", Sleeper)
    victim = sleepers.slice(procs=2)
    pid = victim.pid.call_one().get(timeout=10)
    assert victim.fork_a_child_that_dies.call_one().get(timeout=20)
    pending = victim.nap.call_one(60)
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(SupervisionError) as raised:
        pending.get(timeout=20)
    elapsed = time.monotonic() - start
    print(f"\nSIGKILL: the caller saw SupervisionError after {elapsed:.3f} s")
    assert elapsed < 1.0, elapsed  # its links reset: no heartbeat needed
    assert raised.value.rank == 2
    assert raised.value.host
    assert (raised.value.actor, raised.value.endpoint) == ("sleeper", "nap")
    assert "Endpoint call sleeper.nap() failed, The actor sleeper and all its descendants have failed" in str(raised.value), str(raised.value)
    # SIGKILL runs no code: the loss says that nothing was said (issue 10).
    assert "no last words" in str(raised.value), str(raised.value)
    pending = sleepers.nap.call(0)
    with pytest.raises(SupervisionError, match="the only member of the mesh that failed"):
        pending.get(timeout=20)  # as in Monarch, call() raises when a member is gone
    replies = pending.value_mesh(timeout=20)
    assert [rank for rank, _ in replies.errors()] == [2]
    assert isinstance(replies.errors()[0][1], SupervisionError)
    assert replies.errors()[0][1].endpoint == "nap"
    for rank in (0, 1, 3):
        assert sleepers.slice(procs=rank).nap.call_one(0).get(timeout=10) == rank
    # The owner (here the controller's hook) hears of the member lost with its
    # process, as in Monarch, once.
    failure = faults.of("sleeper")
    assert failure.rank == 2 and "process was lost" in failure.cause, failure.report()
    assert "no last words" in failure.cause, failure.report()
    assert faults.none_within(0.5), "a second report of the same member"


def test_the_survivors_are_a_mesh_that_carries_on():
    # Rank 2 was lost above: what is left is no strided slice of the world.
    world = crown.world()
    live = world.survivors()
    assert live.shape.ranks() == [0, 1, 3, 4]
    assert live.sizes == {"ranks": 4}
    assert live.survivors() is live
    assert pickle.loads(pickle.dumps(live.shape)) == live.shape
    sleepers = live.spawn("survivors", Sleeper)
    assert sleepers.nap.call(0).get(timeout=10).values() == [0, 1, 3, 4]
    assert sleepers.slice(ranks=slice(1, 3)).nap.call(0).get(timeout=10).values() == [1, 3]
    assert sleepers.slice(ranks=2).nap.call_one(0).get(timeout=10) == 3
    assert sleepers.survivors() is sleepers
    # An actor mesh of the whole world, after the loss: its survivors answer.
    everyone = crown.world().spawn("everyone", Sleeper)
    assert everyone.survivors().nap.call(0).get(timeout=10).values() == [0, 1, 3, 4]
    with pytest.raises(ValueError, match="chosen ranks"):
        live.shape.ndslice


# Issue 10: the loss names how the process went, from the departing rank's
# last words (src/bootstrap/departure.h). Run after the test above, on the
# ranks it left alive (1 and 3); a spawn on one rank each.
class Quitter(Actor):
    @endpoint
    def exit_in_c(self, code):
        ctypes.CDLL(None).exit(code)  # as a C or Fortran library would: exit() runs its hooks

    @endpoint
    def signal_self(self, number):
        os.kill(os.getpid(), number)
        time.sleep(30)


def _loss_of(call):
    with pytest.raises(SupervisionError) as raised:
        call.get(timeout=20)
    return str(raised.value)


def test_a_process_that_calls_exit_says_its_code(faults):
    quitters = crown.world().slice(procs=1).spawn("quitter1", Quitter)
    loss = _loss_of(quitters.exit_in_c.call_one(3))
    assert "rank 1" in loss and "exited with code 3" in loss, loss
    assert "Endpoint call quitter1.exit_in_c() failed, " in loss, loss
    failure = faults.of("quitter1")
    assert failure.rank == 1 and "exited with code 3" in failure.cause, failure.report()


def test_a_process_killed_by_a_signal_names_it():
    quitters = crown.world().slice(procs=3).spawn("quitter3", Quitter)
    loss = _loss_of(quitters.signal_self.call_one(signal.SIGSEGV))
    assert "rank 3" in loss and "killed by SIGSEGV" in loss, loss
    assert crown.world().slice(procs=0).spawn("last", Sleeper).nap.call_one(0).get(timeout=10) == 0


def test_a_stopped_process_is_lost_within_the_heartbeat_bound():
    frozen = crown.world().slice(procs=4).spawn("frozen", Sleeper)
    pid = frozen.pid.call_one().get(timeout=10)
    pending = frozen.nap.call_one(60)
    time.sleep(0.3)
    os.kill(pid, signal.SIGSTOP)  # alive, links open, silent: only heartbeats tell
    start = time.monotonic()
    try:
        with pytest.raises(SupervisionError) as raised:
            pending.get(timeout=30)
        elapsed = time.monotonic() - start
    finally:
        os.kill(pid, signal.SIGKILL)
    print(f"\nSIGSTOP: the caller saw SupervisionError after {elapsed:.2f} s")
    assert elapsed < HEARTBEAT_BOUND_S + 1.5, elapsed
    assert "no sign of life" in str(raised.value), str(raised.value)
