"""The Python front end under mpirun -n 4: every adverb, slicing, async
endpoints, actor-to-actor calls, errors with tracebacks (one-way ones logged
on their rank), wrong use, numpy and torch payloads, channels, accumulators
and this_host()."""

import asyncio
import operator
import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

import crown
from crown.actor import (Accumulator, Actor, ActorError, Channel, ValueMesh,
                         current_rank, current_size, endpoint, this_host)


def wraps_received(array) -> bool:
    """Whether array's memory is a buffer crown received (no copy was made)."""
    owner = array
    while not isinstance(owner, crown._crown.ReceivedBuffer):
        if isinstance(owner, memoryview):
            owner = owner.obj
        elif getattr(owner, "base", None) is not None:
            owner = owner.base
        else:
            return False
    return True


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


class Counter(Actor):
    def __init__(self, start):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value

    @endpoint
    def where(self):
        point = current_rank()
        return point.rank, dict(point), current_size()

    @endpoint
    def fail(self, message):
        raise KeyError(message)

    @endpoint
    def echo(self, value):
        return value

    @endpoint
    def fail_unprintably(self):
        raise Unprintable()

    @endpoint
    def echo_wrapped(self, array):
        return array, wraps_received(array)

    @endpoint
    def copied(self):
        return crown._crown.copied_bytes()

    @endpoint
    def nap(self, seconds):
        time.sleep(seconds)
        return current_rank().rank

    @endpoint
    def total_of(self, others):
        return sum(others.incr.call(0).get().values())

    @endpoint
    def tell(self, port, value):
        port.send((current_rank().rank, value))


class Doubler(Actor):
    """Async endpoints: an actor's are all sync or all async (Monarch's rule)."""

    @endpoint
    async def later(self, x):
        await asyncio.sleep(0.01)
        return x * 2


class Flaky(Actor):
    """Raises in a one-way call on one rank; can capture its process's stderr
    (file descriptor 2, where crown's spdlog logger writes)."""

    def __init__(self):
        self.calls = 0
        self._saved = None
        self._path = None

    @endpoint
    def capture_stderr(self):
        sys.stderr.flush()
        self._path = f"/tmp/crown-test-stderr-{os.getpid()}.log"
        self._saved = os.dup(2)
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        os.close(fd)

    @endpoint
    def release_stderr(self) -> str:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        with open(self._path) as captured:
            text = captured.read()
        os.unlink(self._path)
        return text

    @endpoint
    def poke(self, bad_rank, message):
        self.calls += 1
        if current_rank().rank == bad_rank:
            raise ValueError(message)

    @endpoint
    def count(self):
        return self.calls

    @endpoint
    def host_ranks(self):
        return this_host().ranks, this_host().spawn_procs({"gpus": 4}).shape.ranks()


class Picky(Actor):
    def __init__(self):
        if current_rank().rank == 2:
            raise RuntimeError("no room on rank 2")

    @endpoint
    def ok(self):
        return True


if os.environ.get("OMPI_COMM_WORLD_RANK") == "0":

    class OnlyOnTheController(Actor):  # defined at import on rank 0 alone
        @endpoint
        def hello(self):
            return "hello"


@pytest.fixture(scope="module")
def counters():
    return crown.world().spawn("counter", Counter, 10)


def test_world_shape():
    procs = crown.world()
    assert procs.sizes == {"hosts": 1, "procs": 4}
    assert len(procs) == 4


def test_call_returns_a_value_mesh(counters):
    replies = counters.where.call().get(timeout=30)
    assert isinstance(replies, ValueMesh)
    assert len(replies) == 4
    for point, (rank, coords, sizes) in replies.items():
        assert rank == point.rank
        assert coords == dict(point) == {"hosts": 0, "procs": rank}
        assert sizes == {"hosts": 1, "procs": 4}
    assert replies.item(hosts=0, procs=3)[0] == 3


def test_every_adverb(counters):
    one = counters.slice(hosts=0, procs=1)
    before = one.incr.call_one(0).get()
    assert one.incr.call_one(5).get() == before + 5
    chosen = {counters.where.choose().get()[0] for _ in range(8)}
    assert chosen == {0, 1, 2, 3}
    doublers = crown.world().spawn("doubler", Doubler)
    assert sorted(f.get(timeout=30) for f in doublers.later.stream(21)) == [42] * 4
    counters.incr.broadcast(100)
    values = counters.incr.call(0).get().values()
    assert all(v >= 110 for v in values)


def test_an_exception_whose_str_raises_is_still_an_actor_error(counters):
    with pytest.raises(ActorError, match="unprintable Unprintable") as raised:
        counters.slice(procs=1).fail_unprintably.call_one().get(timeout=30)
    assert raised.value.remote_type == "Unprintable"
    assert counters.slice(procs=1).incr.call_one(0).get(timeout=30) >= 10  # it lives


def test_slicing(counters):
    odd = counters.slice(procs=slice(1, 4, 2))
    assert odd.sizes == {"hosts": 1, "procs": 2}
    assert [r for r, _, _ in odd.where.call().get().values()] == [1, 3]
    flat = counters.flatten("all")
    assert flat.size("all") == 4
    assert counters.rename(procs="gpus").sizes == {"hosts": 1, "gpus": 4}
    split = counters.split(procs=(("a", 2), ("b", 2)))
    assert split.sizes == {"hosts": 1, "a": 2, "b": 2}
    assert split.slice(a=1, b=0).where.call_one().get()[0] == 2


def test_async_endpoint_and_await():
    doublers = crown.world().spawn("doubler_awaited", Doubler)

    async def both():
        return await doublers.slice(procs=0).later.call_one(5)

    assert asyncio.run(both()) == 10


def test_actors_call_other_actors(counters):
    helper = crown.world().spawn("helper", Counter, 0)
    expected = sum(counters.incr.call(0).get().values())
    assert helper.slice(procs=3).total_of.call_one(counters).get(timeout=30) == expected


def test_remote_exception_carries_traceback_and_cause(counters):
    with pytest.raises(ActorError) as raised:
        counters.slice(procs=2).fail.call_one("missing key").get()
    error = raised.value
    assert error.rank == 2
    assert isinstance(error.__cause__, KeyError)
    assert "raise KeyError(message)" in error.traceback
    with pytest.raises(ActorError, match="3 other members of the mesh failed too"):
        counters.fail.call("x").get()
    replies = counters.fail.call("x").value_mesh()
    assert len(replies.errors()) == 4
    with pytest.raises(ActorError):
        replies.item(hosts=0, procs=0)


def test_wrong_use_fails_before_sending(counters):
    with pytest.raises(TypeError, match="through an adverb"):
        counters.incr(1)
    with pytest.raises(ValueError, match="exactly one actor"):
        counters.incr.call_one(1)
    with pytest.raises(TypeError, match="cannot pickle") as raised:
        counters.echo.call(threading.Lock())
    assert "cannot be pickled, so it cannot be sent" in raised.value.__notes__[0]
    with pytest.raises(AttributeError, match="no endpoint"):
        counters.nonexistent


def test_a_raising_broadcast_is_logged_on_its_rank_and_its_actor_dies(faults):
    flaky = crown.world().spawn("flaky", Flaky)
    tap = crown.world().spawn("tap", Flaky).slice(procs=2)  # rank 2's stderr, from an actor that lives
    tap.capture_stderr.call_one().get(timeout=10)
    try:
        flaky.poke.broadcast(2, "bad value 1234")
        failure = faults.next()  # the owner hears after the line is logged
    finally:
        log = tap.release_stderr.call_one().get(timeout=10)
    line = next((l for l in log.splitlines() if "bad value 1234" in l), None)
    assert line is not None, f"nothing logged on rank 2: {log!r}"
    assert "[crown r2 error]" in line and "'flaky'" in line, line
    assert "ValueError" in line and "endpoint 'poke'" in line, line
    assert "Traceback (most recent call last)" in log
    assert "raise ValueError(message)" in log
    assert (failure.mesh_name, failure.rank) == ("flaky", 2)
    assert "bad value 1234" in failure.cause
    # The member that raised is dead; the others handled the broadcast and serve on.
    replies = flaky.count.call().value_mesh(timeout=10)
    assert [rank for rank, _ in replies.errors()] == [2]
    assert isinstance(replies.errors()[0][1], crown.actor.SupervisionError)
    assert replies.slice(procs=slice(0, 2)).values() == [1, 1]
    assert flaky.slice(procs=3).poke.call_one(-1, "fine").get(timeout=10) is None


def _failures(faults, count):
    seen = [faults.next() for _ in range(count)]
    assert faults.none_within(0.5)  # and no more
    return sorted(seen, key=lambda failure: failure.rank)


def test_a_spawn_returns_at_once_and_its_owner_hears_of_a_failed_constructor(faults):
    picky = crown.world().spawn("picky", Picky)
    (failure,) = _failures(faults, 1)
    assert (failure.mesh_name, failure.rank) == ("picky", 2)
    assert "no room on rank 2" in failure.cause
    with pytest.raises(crown.actor.SupervisionError, match="no room on rank 2"):
        picky.slice(procs=2).ok.call_one().get(timeout=10)
    assert picky.slice(procs=slice(0, 2)).ok.call().get(timeout=10).values() == [True, True]


def test_numpy_and_torch_round_trip_bit_exact(counters):
    far = counters.slice(procs=3)
    array = np.random.default_rng(7).random(100_000_000 // 8)  # 100 MB of float64
    back = far.echo.call_one(array).get(timeout=120)
    assert back.dtype == array.dtype and np.array_equal(back, array)
    back.flags.writeable and back.__setitem__(0, 1.0)  # arrays arrive writable
    tensor = torch.arange(1000, dtype=torch.float32).reshape(10, 100)
    assert torch.equal(far.echo.call_one(tensor).get(), tensor)


def test_arrays_and_tensors_travel_out_of_band():
    from crown import _pickle

    for value, data_bytes in ((np.ones(1000), 8000), (torch.ones(1000), 4000)):
        payload = _pickle.dumps(value)
        assert _pickle.buffer_count(payload) == 1, type(value)
        assert len(payload) < data_bytes + 600, "the data was copied into the pickle"


def test_a_payload_without_buffers_keeps_the_general_layout():
    """The small-call shortcut of _pickle (no buffers) writes what the general
    path writes: the count 0, the pickle's length, the pickle."""
    import struct

    from crown import _pickle

    value = ("echo", (b"x" * 64,), {"n": 1})
    head, buffers = _pickle.dumps_parts(value, b"\x00")
    assert buffers == []
    count, length = struct.unpack_from("<IQ", head, 1)
    assert count == 0 and length == len(head) - 13
    assert _pickle.loads(head[1:]) == value
    assert _pickle.loads(_pickle.dumps(value)) == value


def test_a_large_array_crosses_without_a_copy_by_crown(counters):
    """Zero copy: a 16 MiB array goes to the socket from its own memory, and
    arrives as one buffer that the unpickled array wraps, both ways; crown's
    own code (wire::copiedBytes: encoding, decoding, joining, reading) copies
    almost none of its bytes on either rank. The old path copied it 6 times
    per hop."""
    far = counters.slice(procs=3)
    array = np.arange(2 << 20, dtype=np.float64)  # 16 MiB
    far.echo_wrapped.call_one(array).get(timeout=60)  # warm: the first call's setup
    here, there = crown._crown.copied_bytes(), far.copied.call_one().get(timeout=10)
    back, wrapped_there = far.echo_wrapped.call_one(array).get(timeout=60)
    copied_here = crown._crown.copied_bytes() - here
    copied_there = far.copied.call_one().get(timeout=10) - there
    assert np.array_equal(back, array)
    assert wrapped_there, "the actor's argument is a copy, not the received buffer"
    assert wraps_received(back), "the reply is a copy, not the received buffer"
    assert back.flags.writeable
    limit = array.nbytes // 64  # the head of a frame, pickles of a few hundred bytes
    assert copied_here < limit and copied_there < limit, (copied_here, copied_there)


def test_a_slow_endpoint_does_not_stall_other_actors(counters):
    slow = counters.slice(procs=1).nap.call_one(2.0)
    start = time.monotonic()
    assert counters.slice(procs=2).incr.call_one(0).get(timeout=10) > 0
    assert time.monotonic() - start < 1.5
    assert slow.get(timeout=10) == 1


def test_channel_and_accumulator(counters):
    port, receiver = Channel.open()
    counters.tell.broadcast(port, "hi")
    got = sorted(receiver.recv().get(timeout=10) for _ in range(4))
    assert got == [(r, "hi") for r in range(4)]
    total = Accumulator(counters.incr, 0, operator.add).accumulate(0).get()
    assert total == sum(counters.incr.call(0).get().values())


def test_this_host_spawn_procs():
    # Each call gives procs that no earlier call gave (Monarch's): first the
    # launch's ranks on this host that are still free, then new processes.
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    assert procs.sizes == {"gpus": 2}  # named by per_host, as in Monarch
    pair = procs.spawn("pair", Counter, 0)
    assert sorted(r for r, _, _ in pair.where.call().get().values()) == [0, 1]
    rest = this_host().spawn_procs({"dp": 1, "tp": 2})
    assert rest.sizes == {"dp": 1, "tp": 2} and rest.shape.ranks() == [2, 3]
    assert this_host().procs({"gpus": 2}).shape == procs.shape  # procs() shares, starts none
    assert this_host().ranks == [0, 1, 2, 3]
    one = this_host().spawn_procs()  # Monarch's default: one proc; none left: a new process
    assert one.sizes == {} and len(one) == 1 and one.shape.ranks()[0] >= 4
    assert one.spawn("one", Counter, 0).where.call_one().get()[0] == one.shape.ranks()[0]
    one.stop()
    with pytest.raises(RuntimeError, match="spare rank slots"):
        this_host().spawn_procs(per_host={"gpus": 8})  # more than the job's spare slots
    with pytest.raises(ValueError, match="at least 1"):
        this_host().spawn_procs(per_host={"gpus": 0})


def test_this_host_inside_an_actor_is_its_own_host():
    flaky = crown.world().spawn("hosts", Flaky)
    ranks, mesh_ranks = flaky.slice(procs=3).host_ranks.call_one().get(timeout=10)
    assert ranks == [0, 1, 2, 3] and mesh_ranks == [0, 1, 2, 3]


def test_classes_only_the_controller_has_travel_by_value():
    class Local(Actor):  # defined here, on rank 0 only: pickled by value
        @endpoint
        def hello(self):
            return f"hello from {current_rank().rank}"

    local = crown.world().spawn("local", Local)
    assert local.hello.call().get().values() == [f"hello from {r}" for r in range(4)]


class Introspective(Actor):
    def __init__(self):
        from crown.actor import context

        self.at_init = str(context().actor_instance)

    @endpoint
    def instance(self):
        from crown.actor import context

        me = context().actor_instance
        return (me.rank.rank, dict(me.rank), me.name, me.class_name, str(me), self.at_init,
                me.proc_mesh.sizes, me.proc.shape.ranks(), str(me.actor_id), me.creator)


def test_context_outside_and_inside_actors(counters):
    from crown.actor import context

    here = context()
    assert here.rank.rank == 0
    client = here.actor_instance  # Monarch's: the controller's own instance
    assert (client.name, str(client), client.rank.rank) == ("client", "client", 0)
    assert client.proc.shape.ranks() == [0]
    mesh = crown.world().slice(procs=slice(2, 4)).spawn("intro", Introspective)
    got = mesh.slice(procs=1).instance.call_one().get(timeout=30)
    rank, point, name, class_name, text, at_init, sizes, proc, actor_id, creator = got
    assert (rank, point, name) == (3, {"hosts": 0, "procs": 1}, "intro")
    assert class_name.endswith(".Introspective"), class_name
    assert text == at_init == "intro{'hosts': 0/1, 'procs': 1/2}"  # in __init__ too
    assert sizes == {"hosts": 1, "procs": 2} and proc == [3]
    assert (actor_id, creator) == ("intro[3]", None)
    mesh.stop()


def test_a_class_missing_on_other_ranks_is_a_clear_error(faults):
    only = crown.world().spawn("only", OnlyOnTheController)
    failures = _failures(faults, 3)
    assert [failure.rank for failure in failures] == [1, 2, 3]
    assert all("top level of the script" in failure.cause for failure in failures)
    assert only.slice(procs=0).hello.call_one().get(timeout=10) == "hello"
