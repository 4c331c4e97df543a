"""A process killed in the middle of a call (mpirun --enable-recovery -n 4):
the caller gets SupervisionError naming the rank and host, the controller
keeps running, and calls to the surviving actors still work."""

import os
import signal
import time

import pytest

import crown
from crown.actor import Actor, SupervisionError, current_rank, endpoint


class Sleeper(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def nap(self, seconds):
        time.sleep(seconds)
        return current_rank().rank


def test_a_killed_process_raises_supervision_error_and_survivors_serve():
    sleepers = crown.world().spawn("sleeper", Sleeper)
    victim = sleepers.slice(procs=2)
    pid = victim.pid.call_one().get(timeout=10)
    pending = victim.nap.call_one(60)
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(SupervisionError) as raised:
        pending.get(timeout=20)
    assert time.monotonic() - start < 5
    assert raised.value.rank == 2
    assert raised.value.host
    replies = sleepers.nap.call(0).get(timeout=20)
    assert [rank for rank, _ in replies.errors()] == [2]
    assert isinstance(replies.errors()[0][1], SupervisionError)
    for rank in (0, 1, 3):
        assert sleepers.slice(procs=rank).nap.call_one(0).get(timeout=10) == rank
