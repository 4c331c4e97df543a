"""Lifecycles under mpirun -n 4: channels are native ports, which spawn no
actor and are forgotten when their receivers go; ActorMesh.stop stops a mesh, after
which calls fail with ActorStoppedError; a thousand short-lived meshes leave
actors and memory where they were."""

import gc
import os

import pytest

import crown
from crown import _crown
from crown.actor import (Actor, ActorError, ActorStoppedError, Channel, current_rank, endpoint,
                         open_ports)


class Counter(Actor):
    def __init__(self, start):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Probe(Actor):
    """Reports on its own process."""

    def __init__(self):
        self.receiver = None

    @endpoint
    def stats(self):
        gc.collect()
        return _crown.python_actors(), _rss(), open_ports()

    @endpoint
    def open_channel(self):
        port, self.receiver = Channel.open()
        return port

    @endpoint
    def take(self):
        return self.receiver.recv().get(timeout=10)

    @endpoint
    def close_channel(self):
        self.receiver.close()


@pytest.fixture(scope="module")
def probes():
    return crown.world().spawn("probe", Probe)


def test_ten_thousand_channels_spawn_no_actor_and_are_forgotten():
    gc.collect()
    receivers_before = open_ports()
    actors_before = _crown.python_actors()
    kept = []
    for i in range(10_000):
        port, receiver = Channel.open()
        if i % 500 == 0:
            port.send(("value", i))
            assert receiver.recv().get(timeout=10) == ("value", i)
        kept.append((port, receiver))
    assert open_ports() == receivers_before + 10_000
    # A channel is an entry of this process's request table: no actor serves it.
    assert _crown.python_actors() == actors_before
    for _, receiver in kept[:100]:
        receiver.close()
    assert open_ports() == receivers_before + 9_900
    del kept, port, receiver
    gc.collect()
    assert open_ports() == receivers_before
    assert _crown.python_actors() == actors_before


def test_a_channel_opened_in_an_actor_lives_on_its_rank(probes):
    far = probes.slice(procs=3)
    port = far.open_channel.call_one().get(timeout=10)
    port.send("to rank 3")
    assert far.take.call_one().get(timeout=10) == "to rank 3"
    actors, _, ports = far.stats.call_one().get(timeout=10)
    assert ports == 1
    # A value sent to a closed port is dropped, and the rank's other
    # channels are served on.
    far.close_channel.call_one().get(timeout=10)
    port.send("nobody reads this")
    again = far.open_channel.call_one().get(timeout=10)
    again.send("still served")
    assert far.take.call_one().get(timeout=10) == "still served"
    assert far.stats.call_one().get(timeout=10)[0] == actors  # no actor spawned for channels


def test_stop_then_calls_fail_with_actor_stopped_error():
    brief = crown.world().spawn("brief", Counter, 0)
    assert brief.incr.call(1).get(timeout=10).values() == [1] * 4
    assert brief.slice(procs=1).stop().get(timeout=30) is None  # a slice: its member only
    with pytest.raises(ActorStoppedError) as raised:
        brief.slice(procs=1).incr.call_one().get(timeout=10)
    assert raised.value.rank == 1
    assert isinstance(raised.value, _crown.ActorStoppedError)
    assert isinstance(raised.value, ActorError)
    replies = brief.incr.call(1).value_mesh(timeout=10)
    assert [rank for rank, _ in replies.errors()] == [1]
    assert all(isinstance(e, ActorStoppedError) for _, e in replies.errors())
    assert sorted(v for _, v, e in replies._entries if e is None) == [2, 2, 2]
    brief.stop().get(timeout=30)  # the members left, and the one stopped already
    replies = brief.incr.call(1).value_mesh(timeout=10)
    assert [rank for rank, _ in replies.errors()] == [0, 1, 2, 3]
    assert all(isinstance(e, ActorStoppedError) for _, e in replies.errors())
    with pytest.raises(ActorStoppedError):
        replies.values()


def _short_lived(count):
    for i in range(count):
        mesh = crown.world().spawn("brief", Counter, i)
        assert mesh.incr.call(1).get(timeout=30).values() == [i + 1] * 4
        mesh.stop().get()


# The bound on RSS growth per rank over 1,000 meshes, measured here (4 ranks,
# after the warm-up): with stop, 4 to 150 KiB; with the meshes left running,
# 1.8 to 1.9 MiB (about 1.9 KiB per actor: the Python instance, its PyActor
# and mailbox, the mesh's point and order counters). 768 KiB sits between.
RSS_BOUND = 768 * 1024


def test_a_thousand_short_lived_meshes_leave_actors_and_memory_where_they_were(probes):
    _short_lived(100)  # warm-up: allocator pools, caches, thread states
    before = probes.stats.call().get(timeout=30).values()
    _short_lived(1000)
    after = probes.stats.call().get(timeout=30).values()
    for rank, ((actors0, rss0, _), (actors1, rss1, _)) in enumerate(zip(before, after)):
        assert actors1 == actors0, f"rank {rank}: {actors1 - actors0} Python actors left"
        assert rss1 - rss0 < RSS_BOUND, f"rank {rank} grew by {(rss1 - rss0) / 1024:.0f} KiB"
