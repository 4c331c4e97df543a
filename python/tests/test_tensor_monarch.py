"""crown.tensor as Monarch programs use it, on real ranks (mpirun -n 4):
an op takes its mesh from its mesh tensor arguments, the ambient mesh only
when none has one (so `no_mesh` fetches a loss as a float), and @remote
takes any function: a closure, a lambda, a function of __main__ travel by
value (cloudpickle), a module-level one by its dotted path."""

import threading

import numpy as np
import pytest
import torch

import crown
from crown.tensor import (LocalTensorError, NoMeshError, RemoteException, _execute, fetch_shard,
                          inspect, no_mesh, remote)
from crown.tensor._remote import _spec_of

COORDS = [{"dp": dp, "tp": tp} for dp in range(2) for tp in range(2)]


def grid():
    """The four ranks as {dp: 2, tp: 2}."""
    return crown.world().flatten("ranks").split(ranks=(("dp", 2), ("tp", 2)))


def each_shard(t):
    return [fetch_shard(t, c).get(timeout=30) for c in COORDS]


# --- the mesh of an op: its tensors', then the ambient one --------------------------


def test_no_mesh_fetches_a_loss_as_a_float_recording_detach_on_its_own_mesh():
    procs = grid()
    with procs.activate():
        x = torch.rand(8, 4, requires_grad=True)
        loss = (x * x).sum()
        loss.backward()
        with no_mesh.activate():  # inside activate(), as a training loop logs
            first = float(crown.fetch_shard(loss.detach(), {"dp": 1, "tp": 0}).get(timeout=30))
    with no_mesh.activate():  # and outside it
        again = float(crown.fetch_shard(loss.detach(), {"dp": 1}, tp=0).get(timeout=30))
    xs = fetch_shard(x.detach(), dp=1, tp=0).get(timeout=30)
    assert first == pytest.approx(float((xs * xs).sum()), rel=1e-5)
    assert again == first


def test_under_no_mesh_local_code_stays_local_and_mesh_tensors_stay_on_their_mesh():
    procs = grid()
    with procs.activate():
        x = torch.ones(3)
        with no_mesh.activate():
            local = torch.ones(3) * 2  # a factory: nothing to take a mesh from
            y = x * 3 + 1  # mesh tensors: recorded on x's mesh
            total = y.reduce(("dp", "tp"))  # a collective too
            with pytest.raises(LocalTensorError, match="local torch tensor"):
                x + local  # still refused at record time
            with pytest.raises(NoMeshError, match="inside no_mesh"):
                remote(torch.ones)(3)  # no mesh tensor argument, no ambient mesh
            with procs.activate():  # activate() inside no_mesh makes its mesh ambient again
                z = torch.full((3,), 5.0)
            after = torch.zeros(1)  # and leaving it, no_mesh again
        inside = torch.zeros(1)  # no_mesh left: recording again
    assert type(local) is torch.Tensor and type(after) is torch.Tensor
    assert isinstance(y, crown.tensor.Tensor) and isinstance(inside, crown.tensor.Tensor)
    for got in each_shard(y):
        np.testing.assert_array_equal(got.numpy(), [4.0] * 3)
    np.testing.assert_array_equal(inspect(total).numpy(), [16.0] * 3)
    np.testing.assert_array_equal(inspect(z, dp=1, tp=1).numpy(), [5.0] * 3)


def test_fetch_shard_takes_monarchs_shard_dict_and_a_pytree():
    procs = grid()
    with procs.activate():
        rank = procs.tensors().rank(("dp", "tp"))
        pair = {"rank": rank, "twice": rank * 2, "label": "kept"}
    got = fetch_shard(pair, {"dp": 1}, tp=1).get(timeout=30)
    assert (int(got["rank"]), int(got["twice"]), got["label"]) == (3, 6, "kept")
    assert int(inspect(rank, {"dp": 1, "tp": 0})) == 2
    with pytest.raises(TypeError, match="a mesh tensor or a pytree"):
        fetch_shard([1, 2])


# --- @remote on any function -----------------------------------------------------------


def module_level_scale(x, k):
    return x * k


@remote
def module_level_decorated(x):
    return x + 100


def test_a_closure_travels_by_value_with_what_it_captured():
    procs = grid()

    def make(k):
        @remote
        def shift(x):
            return x + k  # k: captured, one per closure

        return shift

    plus_one, plus_ten = make(1.0), make(10.0)  # one function, one name, two closures
    with procs.activate():
        x = torch.rand(4)
        a, b = plus_one(x), plus_ten(x)
        c = remote(lambda t: t.flip(0))(x)
    assert type(plus_one._path) is _execute.ByValue and "make.<locals>.shift" in plus_one._path
    for c_, xs, got_a, got_b, got_c in zip(COORDS, each_shard(x), each_shard(a), each_shard(b),
                                          each_shard(c)):
        np.testing.assert_allclose(got_a.numpy(), (xs + 1).numpy(), rtol=1e-6)
        np.testing.assert_allclose(got_b.numpy(), (xs + 10).numpy(), rtol=1e-6)
        np.testing.assert_array_equal(got_c.numpy(), xs.flip(0).numpy())


def test_a_function_of_main_travels_by_value():
    # Defined as a notebook cell defines it: in a module called __main__,
    # which on the workers is another (pytest's), so no path reaches it.
    cell = {"__name__": "__main__"}
    exec("import torch\n"
         "OFFSET = 7.0\n"
         "def centred(x):\n"
         "    return x - x.mean() + OFFSET\n", cell)
    centred = cell["centred"]
    assert centred.__module__ == "__main__"
    procs = grid()
    with procs.activate():
        x = torch.rand(6, dtype=torch.float64)
        y = remote(centred)(x)
        learnt = remote(centred, propagate="cached")(x)  # run on the first proc for its shape
    assert learnt.shape == (6,) and learnt.dtype == torch.float64
    for xs, got in zip(each_shard(x), each_shard(y)):
        np.testing.assert_allclose(got.numpy(), (xs - xs.mean() + 7.0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(inspect(learnt).numpy(), inspect(y).numpy())


def test_module_level_functions_keep_going_by_path():
    assert _spec_of(module_level_scale) == f"{__name__}.module_level_scale"
    assert type(_spec_of(module_level_scale)) is str
    procs = grid()
    with procs.activate():
        x = torch.ones(2)
        y = remote(module_level_scale)(x, 3.0)
        z = module_level_decorated(x)  # the workers import the Remote and run what it wraps
    assert module_level_decorated._path == f"{__name__}.module_level_decorated"
    np.testing.assert_array_equal(inspect(y, dp=1, tp=1).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(inspect(z, dp=1, tp=1).numpy(), [101.0, 101.0])


def by_value_functions_held():
    """On each worker: how many by-value functions it has unpickled."""
    return torch.tensor(len(_execute._by_value))


def test_a_by_value_function_is_pickled_once_and_unpickled_once_per_worker():
    procs = grid()
    scale = 2.0

    def scaled(x, step):
        return x * scale + step

    held = remote(by_value_functions_held, propagate=lambda: torch.empty((), dtype=torch.long))
    f = remote(scaled)
    with procs.activate():
        before = held()
        x = torch.ones(2)
        ys = [f(x, float(step)) for step in range(5)]  # five blobs: the step differs
        after = held()
    spec = f._path
    assert f(x, 0.0) is not None and f._path is spec  # pickled at the first call only
    for c in COORDS:
        assert int(inspect(after, c)) - int(inspect(before, c)) == 1
    np.testing.assert_array_equal(inspect(ys[4], dp=1, tp=0).numpy(), [6.0, 6.0])


def test_a_by_value_function_that_fails_names_itself_and_one_that_cannot_be_pickled_says_so():
    procs = grid()

    def refuses(x):
        raise ValueError("refused on purpose")

    lock = threading.Lock()

    def holds_a_lock(x):
        with lock:
            return x

    with procs.activate():
        x = torch.ones(2)
        y = remote(refuses, propagate=lambda x: x)(x)
        with pytest.raises(TypeError, match="holds_a_lock.*cannot be pickled"):
            remote(holds_a_lock)(x)
    with pytest.raises(RemoteException) as failed:
        inspect(y)
    assert "refuses" in failed.value.op and "refused on purpose" in failed.value.message
