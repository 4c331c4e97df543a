"""Accumulator as Monarch's: accumulate() folds endpoint.stream()'s replies
from the left, seeded by identity (an empty stream gives identity), with a
combine(value so far, reply) whose types may differ; a member's or
combine's exception is what get() raises; any object with stream() folds.
in_tree=True keeps crown's fold up the cast tree (test_reduce.py). And the
Future constructors Monarch programs use: Future(coro=...) and
Future._from_coro(...). Under mpirun -n 4."""

import asyncio
import operator
import threading
import time

import pytest

import crown
from crown import _crown
from crown.actor import (Accumulator, Actor, ActorError, Future, MeshError, Port, ValueMesh,
                         endpoint)

WAIT = 30  # seconds: generous; a hang would run into it


class Member(Actor):
    @endpoint
    def rank(self):
        return _crown.rank()  # the process's rank: a slice's members say which they are

    @endpoint
    def slow(self, seconds):
        time.sleep(seconds)
        return 1

    @endpoint
    def fail_on(self, rank):
        if _crown.rank() == rank:
            raise KeyError(f"nothing for rank {rank}")
        return 1

    @endpoint(explicit_response_port=True)
    def later(self, port: Port[int]):
        port.send(_crown.rank() * 10)


@pytest.fixture(scope="module")
def members():
    return crown.world_flat().spawn("members", Member)


class FakeEndpoint:
    """What Monarch's own tests fold: an object whose stream() yields Futures."""

    def __init__(self, values):
        self.values, self.calls = values, []

    def stream(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return iter([future_of(value) for value in self.values])


def future_of(value) -> Future:
    async def resolve():
        return value

    return Future(coro=resolve())


# Monarch's fold over stream().

def test_a_fake_endpoints_stream_folds_from_the_left():
    assert Accumulator(FakeEndpoint([1, 2, 3]), 0, operator.add).accumulate().get() == 6
    assert Accumulator(FakeEndpoint([]), 42, operator.add).accumulate().get() == 42
    ordered = Accumulator(FakeEndpoint([1, 2, 3]), [], lambda acc, r: acc + [r])
    assert ordered.accumulate().get() == [1, 2, 3]
    fake = FakeEndpoint([1])
    Accumulator(fake, 0, operator.add).accumulate("a", k=1).get()
    assert fake.calls == [(("a",), {"k": 1})]


def test_a_mesh_folds_its_replies_with_a_combine_of_two_types(members):
    assert Accumulator(members.rank, 0, operator.add).accumulate().get(timeout=WAIT) == 6
    # combine(list so far, int reply): the tree fold could not run this.
    ranks = Accumulator(members.rank, [], lambda acc, r: acc + [r]).accumulate()
    assert sorted(ranks.get(timeout=WAIT)) == [0, 1, 2, 3]
    # A combine that does not pickle folds too: it never leaves the caller.
    lock = threading.Lock()
    assert Accumulator(members.rank, 1, lambda a, r: lock and a * (r + 1)).accumulate().get(
        timeout=WAIT) == 24
    with pytest.raises(TypeError, match="cannot pickle"):
        Accumulator(members.rank, 1, lambda a, r: lock and a * r, in_tree=True)


def test_non_consecutive_members_fold(members):
    odd = members.slice(ranks=slice(1, 4, 2))
    assert odd.shape.ndslice.strides == [2]
    assert Accumulator(odd.rank, 0, operator.add).accumulate().get(timeout=WAIT) == 4
    assert Accumulator(odd.rank, 0, operator.add, in_tree=True).accumulate().get(
        timeout=WAIT) == 4
    with pytest.raises(ValueError, match="^empty range"):
        members.slice(ranks=slice(2, 2))  # no mesh of no members: no empty stream from one


def test_a_failure_is_raised_as_it_is(members):
    with pytest.raises(ActorError, match="nothing for rank 2"):
        Accumulator(members.fail_on, 0, operator.add).accumulate(2).get(timeout=WAIT)

    def refuse_three(a, r):
        if r == 3:
            raise ZeroDivisionError("three does not fold")
        return a + r

    folded = Accumulator(members.rank, 0, refuse_three).accumulate()
    with pytest.raises(ZeroDivisionError, match="three does not fold"):
        folded.get(timeout=WAIT)
    with pytest.raises(ZeroDivisionError):
        folded.get(timeout=WAIT)  # kept: every get raises it
    with pytest.raises(MeshError, match="nothing for rank 2"):  # crown's tree fold: MeshError
        Accumulator(members.fail_on, 0, operator.add, in_tree=True).accumulate(2).get(
            timeout=WAIT)


def test_a_get_that_times_out_goes_on_later(members):
    folded = Accumulator(members.slow, 0, operator.add).accumulate(0.5)
    with pytest.raises(TimeoutError):
        folded.get(timeout=0.05)
    assert folded.get(timeout=WAIT) == 4


def test_a_ported_endpoint_folds(members):
    assert Accumulator(members.later, 0, operator.add).accumulate().get(timeout=WAIT) == 60
    with pytest.raises(TypeError, match="replies through a port"):
        Accumulator(members.later, 0, operator.add, in_tree=True)


def test_an_unsent_call_names_accumulate(members):
    with pytest.raises(TypeError) as raised:
        Accumulator(members.fail_on, 0, operator.add).accumulate(threading.Lock())
    assert raised.value.__notes__[0].startswith("fail_on.accumulate(): positional argument 0")


def test_awaited_in_a_coroutine(members):
    async def main():
        total = await Accumulator(members.rank, 0, operator.add).accumulate()
        replies = await members.rank.call()
        return total, replies

    total, replies = asyncio.run(main())
    assert total == 6 and isinstance(replies, ValueMesh) and sorted(replies.values()) == [0, 1,
                                                                                          2, 3]


# Future's constructors.

def test_future_of_a_coroutine(members):
    async def ask():
        return sum((await members.rank.call()).values())

    assert Future(coro=ask()).get(timeout=WAIT) == 6
    assert Future._from_coro(ask()).get() == 6

    async def fail():
        raise KeyError("boom")

    failed = Future(coro=fail())
    with pytest.raises(KeyError, match="boom"):
        failed.get()
    assert isinstance(failed.exception(), KeyError)
    with pytest.raises(TypeError, match="^Future objects are returned by Monarch operations"):
        Future()


def test_future_of_a_coroutine_runs_once(members):
    runs = []

    async def slow():
        runs.append(1)
        await asyncio.sleep(0.3)
        return "late"

    future = Future(coro=slow())
    with pytest.raises(TimeoutError):
        future.get(timeout=0.01)
    assert future.get(timeout=WAIT) == "late" and future.get() == "late"

    async def awaited():
        inner = Future(coro=slow())
        return await inner, await inner, inner.get()

    assert asyncio.run(awaited()) == ("late", "late", "late")
    assert len(runs) == 2
