"""Monarch's semantics of the actor API (issue 13), under mpirun -n 4: call()
raises when a member failed (value_mesh() keeps the per-member view), stream()
yields Futures, PortReceiver.recv() is a Future, current_actor_name(),
this_proc(), generic Channel/Port/PortReceiver, ValueMesh slicing and
iteration, Point's text, Shape and Slice methods, and an argument that cannot be
pickled raising its own exception, with a note naming it."""

import asyncio
import operator
import pickle
import threading
import time
import typing

import pytest

import crown
from crown import _pickle
from crown.actor import (Accumulator, Actor, ActorError, ActorStoppedError, Channel, Future,
                         Port, PortReceiver, Shape, Slice, SupervisionError, ValueMesh,
                         current_actor_name, current_rank, endpoint, this_proc)


class Member(Actor):
    def __init__(self):
        self.name_in_init = current_actor_name()

    @endpoint
    def rank(self):
        return current_rank().rank

    @endpoint
    def fail_on(self, ranks):
        if current_rank().rank in ranks:
            raise KeyError(f"rank {current_rank().rank} fails")
        return current_rank().rank

    @endpoint
    def nap_by_rank(self, gap):
        time.sleep((3 - current_rank().rank) * gap)  # rank 3 answers first, rank 0 last
        return current_rank().rank

    @endpoint
    def echo(self, *args, **kwargs):
        return args, kwargs

    @endpoint
    def timeout_is_mine(self, timeout):
        return timeout

    @endpoint
    def names(self):
        return self.name_in_init, current_actor_name(), str(current_rank())

    @endpoint
    def proc_here(self):
        procs = this_proc()
        guest = procs.spawn("guest", Member)
        return procs.sizes, procs.shape.ranks(), guest.rank.call_one().get(timeout=10)


@pytest.fixture(scope="module")
def members():
    return crown.world().spawn("members", Member)


# 1. call() raises when a member failed; value_mesh() keeps every outcome.

def test_call_raises_the_first_failed_members_error_saying_how_many_others(members):
    future = members.fail_on.call([1, 3])
    with pytest.raises(ActorError) as raised:
        future.get(timeout=30)
    error = raised.value
    assert error.rank == 1  # the first in row-major order
    assert isinstance(error.__cause__, KeyError)
    assert "rank 1 fails" in str(error)
    assert "1 other member of the mesh failed too: rank 3" in str(error).splitlines()[0]
    assert "raise KeyError" in error.traceback
    # The per-member view: on the error, and from the Future without raising.
    assert error.value_mesh is future.value_mesh()
    replies = future.value_mesh(timeout=30)
    assert [rank for rank, _ in replies.errors()] == [1, 3]
    assert replies.item(hosts=0, procs=2) == 2
    with pytest.raises(ActorError, match="rank 3 fails"):
        replies.item(hosts=0, procs=3)
    with pytest.raises(ActorError) as again:  # every get raises the same error
        future.get()
    assert again.value is error


def test_an_actor_error_leads_with_monarchs_sentence(members):
    with pytest.raises(ActorError) as raised:
        members.slice(procs=2).fail_on.call_one([2]).get(timeout=30)
    assert str(raised.value).startswith("Actor call members.fail_on failed.\n"), str(raised.value)
    assert "rank 2 fails" in str(raised.value)


def test_call_with_one_failure_says_it_was_the_only_one_and_await_raises_too(members):
    async def awaited():
        return await members.fail_on.call([2])

    with pytest.raises(ActorError, match=r"the only member of the mesh that failed") as raised:
        asyncio.run(awaited())
    assert raised.value.rank == 2
    assert sorted(raised.value.value_mesh.slice(procs=slice(0, 2)).values()) == [0, 1]


def test_call_without_failures_gives_the_value_mesh(members):
    future = members.rank.call()
    replies = future.get(timeout=30)
    assert isinstance(replies, ValueMesh) and replies.values() == [0, 1, 2, 3]
    assert future.value_mesh() is replies
    with pytest.raises(TypeError, match="value_mesh"):
        members.slice(procs=0).rank.call_one().value_mesh()


def test_call_to_a_stopped_member_raises_actor_stopped_error():
    mesh = crown.world().spawn("partly_stopped", Member)
    mesh.slice(procs=2).stop().get(timeout=30)
    future = mesh.rank.call()
    with pytest.raises(ActorStoppedError) as raised:
        future.get(timeout=30)
    assert raised.value.rank == 2
    assert [r for r, _ in future.value_mesh().errors()] == [2]
    mesh.stop().get(timeout=30)


def test_a_lost_member_is_preferred_over_one_that_raised():
    """A SupervisionError (the process is gone) goes first even when a member
    before it in row-major order raised. (The real loss: test_supervision.)"""
    shape = Shape([("procs", 3)])
    raised_here = ActorError("rank 0, actor 'm' raised KeyError: 'k'\nremote traceback:\n...",
                             rank=0, actor="m", remote_type="KeyError")
    lost = SupervisionError("rank 2 lost: killed by SIGKILL")
    lost.rank, lost.host = 2, "node7"
    mesh = ValueMesh(shape, [(0, None, raised_here), (1, 1, None), (2, None, lost)])
    future = Future(lambda timeout: mesh)
    checked = Future(lambda timeout: crown._values._all_succeeded(future.get(timeout)))
    with pytest.raises(SupervisionError) as caught:
        checked.get()
    error = caught.value
    assert (error.rank, error.host) == (2, "node7")
    assert str(error) == ("rank 2 lost: killed by SIGKILL (1 other member of the mesh failed "
                          "too: rank 0; the error's value_mesh holds every member's outcome)")
    assert error.value_mesh is mesh
    assert str(lost) == "rank 2 lost: killed by SIGKILL"  # the member's own error is unchanged


# 2. stream() yields one Future per member.

def test_stream_yields_futures_with_values_and_errors(members):
    futures = list(members.fail_on.stream([2]))
    assert len(futures) == 4 and all(isinstance(f, Future) for f in futures)
    values, errors = [], []
    for future in futures:
        try:
            values.append(future.get(timeout=30))
        except ActorError as error:
            errors.append(error.rank)
    assert sorted(values) == [0, 1, 3] and errors == [2]


def test_stream_futures_are_replies_in_arrival_order_and_can_time_out(members):
    futures = list(members.nap_by_rank.stream(0.6))
    with pytest.raises(TimeoutError):
        futures[3].get(timeout=0.05)  # the last reply (rank 0's) comes after 1.8 s
    assert futures[3].get(timeout=30) == 0  # the same future, tried again
    assert [f.get(timeout=30) for f in futures[:3]] == [3, 2, 1]


def test_stream_sends_at_once_and_leaves_timeout_to_the_endpoint(members):
    with pytest.raises(TypeError) as raised:
        members.echo.stream(threading.Lock())  # raised by the call, not by iterating
    assert "positional argument 0" in raised.value.__notes__[0]
    assert [f.get(timeout=30) for f in members.timeout_is_mine.stream(timeout=7)] == [7] * 4


# 3. PortReceiver.recv() is a Future.

def test_recv_is_a_future_that_times_out_and_can_be_retried():
    port, receiver = Channel.open()
    pending = receiver.recv()
    assert isinstance(pending, Future)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        pending.get(timeout=0.2)
    assert 0.15 < time.monotonic() - start < 5
    port.send("late")
    assert pending.get(timeout=10) == "late"

    async def awaited():
        return await receiver.recv()

    port.send(42)
    assert asyncio.run(awaited()) == 42


# 4. Names Monarch has.

def test_current_actor_name_is_distinct_per_member_and_set_in_init(members):
    names = members.names.call().get(timeout=30).values()
    for procs, (in_init, in_endpoint, point) in enumerate(names):
        assert in_init == in_endpoint == f"members{{'hosts': 0/1, 'procs': {procs}/4}}"
        assert point == f"{{'hosts': 0/1, 'procs': {procs}/4}}"
    assert len(set(n for n, _, _ in names)) == 4
    assert current_actor_name() == "client"  # the controller, outside any actor


def test_str_of_a_point_reads_as_monarchs(members):
    split = members.split(procs=(("a", 2), ("b", 2)))
    assert split.slice(a=1, b=0).names.call_one().get(timeout=30)[2] == \
        "{'hosts': 0/1, 'procs': 2/4}"  # the actor's point is in the mesh it was spawned on
    assert str(current_rank()) == "{'ranks': 0/4}"
    assert current_rank().size("ranks") == 4


def test_a_points_dimensions_keep_the_meshs_order():
    zoned = crown.world().rename(hosts="zone", procs="gpus").spawn("zoned", Member)
    try:
        point = zoned.slice(gpus=1).names.call_one().get(timeout=30)[2]
        assert point == "{'zone': 0/1, 'gpus': 1/4}"  # not sorted by label
    finally:
        zoned.stop()


def test_this_proc_is_the_process_alone():
    here = this_proc()
    assert here.sizes == {} and here.shape.ranks() == [0] and len(here) == 1
    guest = here.spawn("guest", Member)
    assert guest.rank.call_one().get(timeout=10) == 0
    inside = crown.world().spawn("host_of_guests", Member).slice(procs=2)
    assert inside.proc_here.call_one().get(timeout=30) == ({}, [2], 2)


def test_channel_port_and_receiver_are_generic():
    port, receiver = Channel[int].open()
    assert isinstance(port, Port) and isinstance(receiver, PortReceiver)
    assert typing.get_origin(Port[int]) is Port and typing.get_args(Port[int]) == (int,)
    assert typing.get_origin(PortReceiver[str]) is PortReceiver
    assert typing.get_origin(Future[int]) is Future
    port.send(5)
    assert receiver.recv().get(timeout=10) == 5


def test_value_mesh_slices_flattens_and_iterates(members):
    replies = members.rank.call().get(timeout=30)
    assert replies.slice(hosts=0, procs=2).item() == 2  # no dimension left
    assert replies.slice(procs=2).item() == 2  # a mesh of one needs no coordinates
    with pytest.raises(ValueError, match="miss dimension"):
        replies.item(hosts=0)
    odd = replies.slice(procs=slice(1, 4, 2))
    assert odd.sizes == {"hosts": 1, "procs": 2} and odd.values() == [1, 3]
    assert odd.item(hosts=0, procs=1) == 3
    flat = replies.flatten("r")
    assert flat.sizes == {"r": 4} and flat.slice(r=3).item() == 3
    pairs = list(replies)
    assert [value for _, value in pairs] == [0, 1, 2, 3]
    assert [dict(point) for point, _ in pairs][1] == {"hosts": 0, "procs": 1}
    assert [point.rank for point, _ in pairs] == [0, 1, 2, 3]
    assert len(flat) == 4 and flat.size("r") == 4


def test_shape_and_slice_methods():
    shape = Shape([("hosts", 2), ("gpus", 4)])
    assert shape.at("hosts", 1).ranks() == [4, 5, 6, 7] and shape.at("hosts", 1).labels == ["gpus"]
    kept = shape.select("gpus", slice(1, 4, 2))
    assert kept.sizes == [("hosts", 2), ("gpus", 2)] and kept.ranks() == [1, 3, 5, 7]
    assert shape.select({"hosts": 0, "gpus": slice(0, 2)}).ranks() == [0, 1]  # crown's form
    assert shape.index(hosts=1, gpus=3).ranks() == [7] and shape.index(hosts=1, gpus=3).labels == []
    with pytest.raises(ValueError, match="no dimension"):
        shape.at("nodes", 0)
    with pytest.raises(TypeError, match="needs a slice"):
        shape.select("gpus")
    nd = kept.ndslice
    assert isinstance(nd, Slice) and (nd.offset, nd.sizes, nd.strides) == (1, [2, 2], [4, 2])
    assert nd.ndim == 2 and len(nd) == 4 and list(nd) == [1, 3, 5, 7]
    assert nd.index(5) == 2 and nd.get(2) == 5 and nd.coordinates(7) == [1, 1]
    assert nd.nditem([1, 0]) == 5 and nd[1:3] == (3, 5) and nd[-1] == 7
    for absent in (0, 2, 9, -1):
        with pytest.raises(ValueError):
            nd.index(absent)
    with pytest.raises(IndexError):
        nd.nditem([2, 0])
    assert nd == Slice(offset=1, sizes=[2, 2], strides=[4, 2]) != shape.ndslice
    assert shape.ndslice == Slice(offset=0, sizes=[2, 4], strides=[4, 1])
    # Built Monarch's way: Shape(labels, Slice), and Slice.new_row_major.
    built = Shape(["hosts", "gpus"], Slice(offset=1, sizes=[2, 2], strides=[4, 2]))
    assert built == kept and built.ranks() == [1, 3, 5, 7]
    row = Slice.new_row_major([2, 3])  # sizes, as Monarch's (test_shapes.py has the rest)
    assert (row.offset, row.sizes, row.strides) == (0, [2, 3], [3, 1])
    assert Shape(["a", "b"], row).ranks() == [0, 1, 2, 3, 4, 5]


def test_a_replaced_shape_keeps_its_dimensions():
    # crown's seam for respawned ranks: positions stand for new rank numbers.
    mended = Shape([("hosts", 2), ("procs", 2)]).replacing({1: 6})
    assert mended.ranks() == [0, 6, 2, 3] and mended.sizes == [("hosts", 2), ("procs", 2)]
    assert mended.chosen and mended.coordinates(6) == {"hosts": 0, "procs": 1}
    assert pickle.loads(pickle.dumps(mended)) == mended
    with pytest.raises(ValueError, match="not in slice"):
        mended.replacing({1: 7})


# 5. An argument that cannot be pickled raises its own exception, as in
# Monarch; crown's note names the argument, with its type.

LOCK_ERROR = "cannot pickle '_thread.lock' object"


class NoState:
    def __getstate__(self):
        raise RuntimeError("no state for you")


def crown_note(error: BaseException) -> str:
    notes = getattr(error, "__notes__", [])
    assert len(notes) == 1, notes
    return notes[0]

ADVERBS = {
    "call": lambda ep, *a, **k: ep.call(*a, **k),
    "call_one": lambda ep, *a, **k: ep.call_one(*a, **k),
    "choose": lambda ep, *a, **k: ep.choose(*a, **k),
    "stream": lambda ep, *a, **k: ep.stream(*a, **k),
    "broadcast": lambda ep, *a, **k: ep.broadcast(*a, **k),
    "accumulate": lambda ep, *a, **k: Accumulator(ep, (), operator.add).accumulate(*a, **k),
}


@pytest.mark.parametrize("adverb", sorted(ADVERBS))
def test_an_unpicklable_argument_is_named_with_its_type(members, adverb):
    target = members.slice(procs=1) if adverb == "call_one" else members
    with pytest.raises(TypeError) as raised:
        ADVERBS[adverb](target.echo, 1, threading.Lock())
    assert str(raised.value) == LOCK_ERROR  # the lock's own error
    note = crown_note(raised.value)
    assert note == (f"echo.{adverb}(): positional argument 1 (_thread.lock) cannot be "
                    f"pickled, so it cannot be sent"), note
    with pytest.raises(TypeError) as raised:
        ADVERBS[adverb](target.echo, 1, guard=threading.Lock())
    assert "keyword argument 'guard' (_thread.lock)" in crown_note(raised.value)
    with pytest.raises(RuntimeError, match="^no state for you$") as raised:  # not a TypeError
        ADVERBS[adverb](target.echo, NoState())
    assert f"echo.{adverb}(): positional argument 0 (" in crown_note(raised.value)
    assert target.rank.call().get(timeout=30).values()  # nothing was sent; it serves on


def test_an_unpicklable_value_for_a_port_is_named():
    port, _ = Channel.open()
    with pytest.raises(TypeError, match=f"^{LOCK_ERROR}$") as raised:
        port.send(threading.Lock())
    assert crown_note(raised.value).startswith(
        "Port.send(): positional argument 0 (_thread.lock) cannot be pickled")


def test_an_unpicklable_spawn_argument_is_named():
    with pytest.raises(TypeError, match=f"^{LOCK_ERROR}$") as raised:
        crown.world().spawn("unpicklable", Member, threading.Lock())
    assert crown_note(raised.value).startswith(
        "spawn('unpicklable', Member): positional argument 0 (_thread.lock) cannot be pickled")


def test_a_call_that_pickles_is_pickled_once(members, monkeypatch):
    calls = []
    dumps, dumps_parts = _pickle.dumps, _pickle.dumps_parts
    monkeypatch.setattr(_pickle, "dumps", lambda obj: calls.append("dumps") or dumps(obj))
    monkeypatch.setattr(_pickle, "dumps_parts",
                        lambda obj, prefix=b"": calls.append("parts") or dumps_parts(obj, prefix))
    future = members.slice(procs=1).echo.call_one(1, x=2)
    assert calls == ["parts"]
    assert future.get(timeout=30) == ((1,), {"x": 2})
