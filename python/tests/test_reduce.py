"""Accumulator(..., in_tree=True) over the cast tree under mpirun -n 4 with
CROWN_CAST_FANOUT=1 (a chain: the controller sends to rank 0, rank 0
forwards to 1, 1 to 2, 2 to 3), so ranks 1 and 2 fold too: every hop folds
with the user's combine function, the identity is folded once, and a
combine or an endpoint that raises fails the result with MeshError naming
the rank. (Without in_tree, Monarch's fold over stream(): test_accumulate.py.)"""

import functools
import operator

import pytest

import crown
from crown import _crown
from crown.actor import Accumulator, Actor, MeshError, current_rank, endpoint

InTree = functools.partial(Accumulator, in_tree=True)


class Giver(Actor):
    @endpoint
    def rank(self):
        return current_rank().rank

    @endpoint
    def pair(self):
        rank = current_rank().rank
        return (rank % 2, rank)

    @endpoint
    def as_list(self):
        return [current_rank().rank]

    @endpoint
    def fail_on(self, rank):
        if current_rank().rank == rank:
            raise KeyError(f"nothing for rank {rank}")
        return 1


def concat_noting_where(a, b):
    """List concatenation that records the rank each fold ran on."""
    return a + b + [("folded on", _crown.rank())]


def refuse_three(a, b):
    if 3 in (a, b):
        raise ZeroDivisionError("three does not fold")
    return a + b


@pytest.fixture(scope="module")
def givers():
    return crown.world().spawn("giver", Giver)


def test_sum_and_max_of_tuples_match_a_fold_on_the_controller(givers):
    ranks = givers.rank.call().get(timeout=30).values()
    assert InTree(givers.rank, 0, operator.add).accumulate().get(timeout=30) == sum(ranks)
    pairs = givers.pair.call().get(timeout=30).values()
    expected = functools.reduce(max, pairs, (-1, -1))
    assert InTree(givers.pair, (-1, -1), max).accumulate().get(timeout=30) == expected
    assert expected == (1, 3)
    # A lambda travels by value (cloudpickle) to every hop.
    lists = InTree(givers.as_list, [], lambda a, b: a + b).accumulate().get(timeout=30)
    assert sorted(lists) == [0, 1, 2, 3]


def test_hops_fold_and_the_identity_is_folded_once(givers):
    total = InTree(givers.as_list, ["identity"], concat_noting_where).accumulate().get(
        timeout=30)
    values = sorted(v for v in total if isinstance(v, int))
    folds = [where for tag, where in (v for v in total if isinstance(v, tuple))]
    assert values == [0, 1, 2, 3]
    assert total.count("identity") == 1
    # Three folds of four replies up the chain (on ranks 2, 1, 0), and the
    # identity's on the caller (rank 0).
    assert sorted(folds) == [0, 0, 1, 2], f"folds ran on ranks {folds}"


def test_a_raising_combine_is_a_mesh_error_naming_the_rank(givers):
    with pytest.raises(MeshError) as raised:
        InTree(givers.rank, 0, refuse_three).accumulate().get(timeout=30)
    error = raised.value
    # Which member is named depends on arrival order at the hops (whose reply
    # met the partial value holding 3), so: some, each with the combine's error.
    assert error.failures, str(error)
    assert all("three does not fold" in what for _, what in error.failures), error.failures
    assert all(f"rank {rank}" in str(error) for rank, _ in error.failures)
    assert "combine function refuse_three raised ZeroDivisionError on rank" in str(error)
    assert "three does not fold" in str(error)
    assert "ZeroDivisionError" in str(error)
    assert "raise ZeroDivisionError" in str(error)  # the traceback
    # Nothing crashed: the same mesh folds again.
    assert InTree(givers.rank, 0, operator.add).accumulate().get(timeout=30) == 6


def test_a_raising_endpoint_is_a_mesh_error_naming_its_rank(givers):
    with pytest.raises(MeshError) as raised:
        InTree(givers.fail_on, 0, operator.add).accumulate(2).get(timeout=30)
    assert [rank for rank, _ in raised.value.failures] == [2]
    assert "nothing for rank 2" in str(raised.value)
    assert InTree(givers.fail_on, 0, operator.add).accumulate(7).get(timeout=30) == 4


def test_a_combine_that_cannot_travel_fails_before_sending(givers):
    import threading

    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot pickle") as raised:
        InTree(givers.rank, 0, lambda a, b: lock and a + b)
    assert "its combine cannot be pickled" in raised.value.__notes__[0]
