"""Issue 10 part 3 under mpirun (8 ranks, fan-out 2, --enable-recovery): a
cast-tree hop is stopped with SIGSTOP while broadcasts are sent through it
(so they sit unread in its sockets, as in the moments before a crash), then
SIGKILLed, which loses them. Its parent resends the last ones it had sent
it (CROWN_CAST_RESEND_WINDOW=4 here) around it at once, so every live
member gets every broadcast once and in order, long before the order gap
timeout (5 s here); what the window cannot cover reaches the sender's
crown.actor.unhandled_fault_hook with the count.

The tree of {hosts: 1, procs: 8} with k = 2: the controller sends to ranks
0 and 1; rank 0 forwards to 2 and 3, rank 1 to 4 and 5, rank 2 to 6 and 7."""

import os
import signal
import threading
import time

import pytest

import crown
import crown.actor
from crown.actor import Actor, SupervisionError, endpoint


class Recorder(Actor):
    def __init__(self):
        self.notes = {}

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def note(self, tag, n):
        self.notes.setdefault(tag, []).append(n)

    @endpoint
    def seen(self, tag):
        return self.notes.get(tag, [])


@pytest.fixture(scope="module")
def recorders():
    return crown.world().spawn("recorder", Recorder)


def stop(pid):
    """SIGSTOPs pid and returns once every thread of it has stopped: kill()
    returns when the stop is pending, and on a loaded machine the process's
    other threads run on (forwarding what the test means to strand) until
    the thread the signal went to is scheduled and stops them all."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
        if all(state in ("T", "t") for state in states):
            return
        assert time.monotonic() < deadline, f"process {pid} did not stop: {states}"
        time.sleep(0.001)


def kill_after_stop(recorders, rank, while_stopped):
    """SIGSTOPs rank, runs while_stopped(), SIGKILLs it, and returns once the
    controller knows it is lost."""
    victim = recorders.slice(procs=rank)
    pid = victim.pid.call_one().get(timeout=10)
    stop(pid)
    while_stopped()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SupervisionError):
        victim.pid.call_one().get(timeout=10)


def test_broadcasts_lost_with_a_killed_hop_reach_every_member_once_in_order(recorders):
    sent = {rank: [] for rank in range(8)}
    count = iter(range(1000))

    def broadcast(members=range(8)):
        n = next(count)
        (recorders if len(members) == 8 else recorders.slice(procs=members[0])).note.broadcast(
            "a", n)
        for rank in members:
            sent[rank].append(n)

    def while_stopped():
        for i in range(3):  # lost in rank 1's sockets; rank 0 keeps the last 4 it sent it
            broadcast()
            broadcast([4 + i % 2])  # straight to a member below rank 1, held behind the gap

    for _ in range(5):
        broadcast()
    start = time.monotonic()
    kill_after_stop(recorders, 1, while_stopped)
    for _ in range(5):
        broadcast()  # around the lost hop
    for rank in (0, 2, 3, 4, 5, 6, 7):
        assert recorders.slice(procs=rank).seen.call_one("a").get(timeout=10) == sent[rank]
    assert time.monotonic() - start < 3.0, "a gap waited for its 5 s timeout"


def test_broadcasts_beyond_the_window_reach_the_unhandled_fault_hook(recorders):
    reports = []
    arrived = threading.Condition()

    def hook(failure):
        with arrived:
            reports.append(failure)
            arrived.notify_all()

    default = crown.actor.unhandled_fault_hook
    crown.actor.unhandled_fault_hook = hook
    try:
        def send_through_the_stopped_hop():
            for n in range(10):
                recorders.note.broadcast("b", n)
            # Rank 0 forwards each to rank 2 and rank 3 at once: once rank 3 has all
            # ten, those to rank 2 sit in its sockets (a loaded machine may be slower
            # than the kill, and rank 0 would then route around the dead hop instead).
            deadline = time.monotonic() + 10
            while (len(recorders.slice(procs=3).seen.call_one("b").get(timeout=10)) < 10
                   and time.monotonic() < deadline):
                time.sleep(0.01)

        # 10 lost in rank 2's sockets; rank 0 (its parent) resends the last 4.
        kill_after_stop(recorders, 2, send_through_the_stopped_hop)
        with arrived:
            arrived.wait_for(lambda: len(reports) >= 3, timeout=15)
        time.sleep(0.2)  # one report per member, no more
    finally:
        crown.actor.unhandled_fault_hook = default
    # The killed hop's own member is a failure of the mesh (its process was lost).
    deaths = [report for report in reports if isinstance(report, crown.actor.MeshFailure)]
    assert [(death.mesh_name, death.rank) for death in deaths] == [("recorder", 2)], deaths
    reports = [report for report in reports if isinstance(report, crown.actor.MessagesLost)]
    seen = {rank: recorders.slice(procs=rank).seen.call_one("b").get(timeout=10) for rank in (6, 7)}
    assert sorted(report.rank for report in reports) == [6, 7], seen
    for report in reports:
        assert isinstance(report, crown.actor.MessagesLost)
        assert report.count == 6 and report.last - report.first == 5
        assert report.actor == "recorder" and report.sender == (0, 0)
        assert "6 messages" in str(report)
    for rank in (6, 7):
        assert recorders.slice(procs=rank).seen.call_one("b").get(timeout=10) == [6, 7, 8, 9]
