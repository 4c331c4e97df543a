"""Methods not marked @endpoint, and propagators for rref() (issue 47),
under mpirun -n 4, as Monarch has them:

- ``mesh.method`` of a plain method is a NotAnEndpoint: calling it raises
  RuntimeError (Monarch's words), and ``as_endpoint(mesh.method)`` makes it an
  endpoint with every adverb (explicit_response_port too); as_endpoint refuses
  anything else with ValueError.
- ``as_endpoint(mesh.method, propagate=fn).rref(x)`` and
  ``@endpoint(propagate=fn)``: the propagator's pytree, each of its tensors a
  mesh tensor made of the actors' results (shaped as the results are);
  ``propagate="inspect"``: rref() runs the endpoint and returns None.
"""

import numpy as np
import pytest
import torch

import crown
from crown.actor import Actor, ActorError, Port, as_endpoint, current_rank, endpoint
from crown.tensor import fetch_shard, inspect

WAIT = 20


def shard(t, procs):
    return fetch_shard(t, hosts=0, procs=procs).get(timeout=WAIT)


class Linear(Actor):
    """One weight per actor; forward is a plain method, update an endpoint."""

    scale = 2  # in dir(Linear), but no method

    def __init__(self, n: int, m: int):
        self.weight = torch.zeros((n, m))

    def forward(self, x):
        return x @ self.weight

    def rank_plus(self, k):
        return current_rank().rank + k

    def reply_later(self, port: Port, k):
        port.send(current_rank().rank * k)

    @endpoint(propagate="inspect")
    def update(self, w):
        self.weight += w

    @endpoint(propagate=lambda x: (torch.empty(2, dtype=torch.float64), "tag",
                                   torch.empty(3, dtype=torch.int64)))
    def pieces(self, x):
        rank = current_rank().rank
        return (torch.full((2,), float(rank), dtype=torch.float64), "ignored",
                torch.arange(3) + rank * 10)

    @endpoint(propagate=lambda x: (torch.empty(2), torch.empty(2)))
    def one_not_two(self, x):
        return torch.zeros(2)

    @endpoint(propagate="mocked")
    def mocked(self):
        return torch.zeros(1)

    @endpoint
    def total(self):
        return float(self.weight.sum())


class Async(Actor):
    async def double(self, x):
        return 2 * x

    @endpoint
    async def ready(self):
        return True


@pytest.fixture(scope="module")
def linears():
    procs = crown.world()
    mesh = procs.spawn("linears", Linear, 3, 4)
    yield procs, mesh
    mesh.stop()


def test_a_plain_method_is_not_an_endpoint_until_as_endpoint(linears):
    _, mesh = linears
    with pytest.raises(RuntimeError, match=r"Linear'>\.forward is not annotated as an endpoint"):
        mesh.forward(1)
    with pytest.raises(AttributeError, match=r"as_endpoint\(mesh\.forward\)\.call"):
        mesh.forward.call
    with pytest.raises(AttributeError, match="no endpoint 'nothing'"):
        mesh.nothing
    for wrong in (mesh.update, Linear.forward, lambda: 0):
        with pytest.raises(ValueError, match="expected a method of a spawned actor"):
            as_endpoint(wrong)
    with pytest.raises(ValueError, match="Linear.scale is not a method"):
        as_endpoint(mesh.scale)
    with pytest.raises(ValueError, match="propagate='bogus'"):
        as_endpoint(mesh.forward, propagate="bogus")
    with pytest.raises(ValueError, match="propagate=3"):
        endpoint(propagate=3)(lambda self: None)


def test_as_endpoint_calls_a_plain_method_through_every_adverb(linears):
    _, mesh = linears
    plus = as_endpoint(mesh.rank_plus)
    assert sorted(plus.call(100).get(timeout=WAIT).values()) == [100, 101, 102, 103]
    assert plus.call(5).get(timeout=WAIT).item(hosts=0, procs=2) == 7
    assert as_endpoint(mesh.slice(procs=3).rank_plus).call_one(1).get(timeout=WAIT) == 4
    assert plus.choose(0).get(timeout=WAIT) in range(4)
    assert sorted(f.get(timeout=WAIT) for f in plus.stream(10)) == [10, 11, 12, 13]
    plus.broadcast(0)  # no reply; the next call comes after it
    ported = as_endpoint(mesh.reply_later, explicit_response_port=True)
    assert sorted(ported.call(3).get(timeout=WAIT).values()) == [0, 3, 6, 9]
    with pytest.raises(ActorError, match="TypeError"):  # raised in the method: its caller's
        as_endpoint(mesh.slice(procs=0).rank_plus).call_one("not a number").get(timeout=WAIT)
    assert plus.call(0).get(timeout=WAIT).item(hosts=0, procs=0) == 0  # the actor lives on


def test_as_endpoint_of_an_async_method():
    mesh = crown.world().spawn("doublers", Async)
    assert mesh.ready.call().get(timeout=WAIT)
    assert list(as_endpoint(mesh.double).call(21).get(timeout=WAIT).values()) == [42] * 4
    mesh.stop()


def test_rref_of_a_plain_method_with_a_propagator_as_monarch_has_it(linears):
    procs, mesh = linears
    with procs.activate():
        y = torch.ones((4, 3))
        # The propagator says (3, 4); the results are (4, 4): crown's mesh
        # tensor has the results' shape.
        t = as_endpoint(mesh.forward, propagate=lambda x: torch.rand(3, 4)).rref(y)
        assert tuple(t.shape) == (4, 4)
        assert inspect(t.sum()).item() == 0
        assert mesh.update.rref(torch.ones((3, 4))) is None  # "inspect": nothing kept
        t = as_endpoint(mesh.forward, propagate=lambda x: torch.rand(4, 4)).rref(y)
        assert inspect(t.sum()).item() == 3 * 4 * 4
    assert list(mesh.total.call().get(timeout=WAIT).values()) == [12.0] * 4
    with procs.activate():
        mesh.update.rref(-torch.ones((3, 4)))
    assert list(mesh.total.call().get(timeout=WAIT).values()) == [0.0] * 4
    # Without a propagator the result is one tensor (crown's rref as before).
    t = as_endpoint(mesh.forward).rref(torch.ones(2, 3))
    assert tuple(t.shape) == (2, 4)


def test_an_endpoints_propagator_gives_the_pytree_of_mesh_tensors(linears):
    procs, mesh = linears
    with procs.activate():
        floats, tag, ints = mesh.pieces.rref(torch.zeros(1))
    assert tag == "tag"  # a leaf that is not a tensor: the propagator's
    assert floats.dtype == torch.float64 and ints.dtype == torch.int64
    for rank in range(4):
        np.testing.assert_array_equal(shard(floats, rank).numpy(), [float(rank)] * 2)
        np.testing.assert_array_equal(shard(ints, rank).numpy(), [rank * 10 + i for i in range(3)])


def test_a_result_that_does_not_match_its_propagator_fails_the_rref(linears):
    procs, mesh = linears
    with procs.activate():
        with pytest.raises(ActorError, match=r"propagate gave 2 tensor\(s\), but the endpoint "
                                             r"returned 1"):
            mesh.one_not_two.rref(torch.zeros(1))
        with pytest.raises(NotImplementedError, match="mocked propagation"):
            mesh.mocked.rref()
        with pytest.raises(ActorError, match="rref needs the endpoint to return a torch.Tensor"):
            as_endpoint(mesh.rank_plus).rref(1)
