"""A ported endpoint's caller and a lost process (mpirun --enable-recovery
-n 5): the member returned without replying (it would reply later), then its
process is killed; the caller waiting on the reply port gets SupervisionError
naming the rank, within seconds, instead of waiting forever (DLV-1). A port
handed on to another rank hears of that rank's loss too (kPortWatch)."""

import os
import signal
import time

import pytest

import crown
from crown.actor import Actor, Channel, SupervisionError, endpoint

WAIT = 20


class Keeper(Actor):
    def __init__(self):
        self.ports = []

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint(explicit_response_port=True)
    def keep(self, port):
        self.ports.append(port)  # a reply that never comes

    @endpoint
    def kept(self):
        return len(self.ports)

    @endpoint
    def hold(self, port):
        self.ports.append(port)

    @endpoint(explicit_response_port=True)
    def hand_on(self, port, other):
        self.ports.append(port)  # still held here: its reply is the other's to send
        other.hold.call_one(port).get(timeout=WAIT)


def test_a_process_lost_after_its_member_returned_fails_the_waiting_caller():
    keepers = crown.world_flat().spawn("keepers", Keeper)
    victim = keepers.slice(ranks=2)
    pid = victim.pid.call_one().get(timeout=WAIT)
    pending = victim.keep.call_one()
    streamed = keepers.slice(ranks=slice(1, 3)).keep.stream()
    assert victim.kept.call_one().get(timeout=WAIT) == 2  # both returned
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(SupervisionError) as raised:
        pending.get(timeout=WAIT)
    assert time.monotonic() - start < 10
    assert raised.value.rank == 2
    with pytest.raises(SupervisionError) as raised:
        next(streamed).get(timeout=WAIT)  # the first to arrive: rank 2's loss
    assert raised.value.rank == 2
    with pytest.raises(TimeoutError):
        next(streamed).get(timeout=0.5)  # rank 1 lives and has not replied
    assert keepers.slice(ranks=1).kept.call_one().get(timeout=WAIT) == 1


def test_a_port_waiting_on_a_sigkilled_rank_fails_within_a_second():
    keeper = crown.world_flat().slice(ranks=3).spawn("keeper3", Keeper)
    pid = keeper.pid.call_one().get(timeout=WAIT)
    pending = keeper.keep.call_one()
    assert keeper.kept.call_one().get(timeout=WAIT) == 1  # it returned, keeping the port
    with pytest.raises(TimeoutError):
        pending.get(timeout=0.3)  # held, nothing sent
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(SupervisionError) as raised:
        pending.get(timeout=WAIT)
    assert time.monotonic() - start < 1.0  # the watched rank's loss, not a probe
    assert raised.value.rank == 3


def test_a_reply_port_handed_on_to_a_third_rank_fails_within_a_second_when_it_is_killed():
    world = crown.world_flat()
    member = world.slice(ranks=1).spawn("member1", Keeper)
    third = world.slice(ranks=4).spawn("third4", Keeper)
    pid = third.pid.call_one().get(timeout=WAIT)
    pending = member.hand_on.call_one(third)
    port, receiver = Channel.open()  # watches no rank: its holders announce themselves
    third.hold.call_one(port).get(timeout=WAIT)
    deadline = time.monotonic() + WAIT
    while third.kept.call_one().get(timeout=WAIT) != 2:  # the third rank holds both now
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(TimeoutError):
        pending.get(timeout=0.3)  # held on ranks 1 and 4, nothing sent
    os.kill(pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(SupervisionError) as raised:
        pending.get(timeout=WAIT)
    assert time.monotonic() - start < 1.0  # heard from the owner's watch, not a probe
    assert raised.value.rank == 1  # the member whose reply it was
    assert raised.value.lost_rank == 4  # the rank lost
    with pytest.raises(SupervisionError) as raised:
        receiver.recv().get(timeout=1.0)  # the channel's sender went with its process
    assert raised.value.lost_rank == 4
