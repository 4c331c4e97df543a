"""The recording front end of crown's distributed tensors, in one process:
a LocalBackend simulates every rank of a {"hosts": 2, "procs": 2} mesh.
(pytest-timeout is not installed here: each test runs in well under a second
or two.)"""

import gc
import itertools
import time

import numpy as np
import pytest
import torch

import crown.tensor as ct
from crown.tensor import (
    LocalBackend,
    Mesh,
    fetch_shard,
    inspect,
    no_mesh,
    remote,
)
from crown.tensor import _commands
from crown.tensor.errors import (
    CollectiveGradError,
    DroppedTensorError,
    LocalTensorError,
    MeshMismatchError,
    NoMeshError,
    ReduceArgumentError,
    RemoteException,
    ShapeError,
    LocalValueError,
)

import tensor_helpers as helpers

CROWN_RUNTIME = False  # conftest: no MPI bootstrap for this module

SHAPE = {"hosts": 2, "procs": 2}
COORDS = [dict(hosts=h, procs=p) for h in range(2) for p in range(2)]


@pytest.fixture
def mesh():
    return Mesh(LocalBackend(SHAPE, seed=100))


def shards(t):
    return [inspect(t, **c) for c in COORDS]


def per_rank_reference(fn, seed=100, n=4):
    """fn() run locally once per rank with that rank's generator."""
    out = []
    for rank in range(n):
        torch.manual_seed(seed + rank)
        out.append(fn())
    return out


# --- the dispatch mode ------------------------------------------------------


def test_activate_sets_its_mode_straight_into_torch_and_takes_it_off_on_leaving(mesh):
    with mesh.activate():
        assert torch._C._len_torch_dispatch_stack() == 0  # not on torch's Python stack
        x = torch.ones(3) * 2
        with pytest.raises(ShapeError):
            x @ torch.ones(4, 4)  # noqa: B018 - a failure inside the mode leaves it on
        y = torch.zeros(3) + x
    assert isinstance(y, ct.Tensor)
    assert type(torch.ones(2)) is torch.Tensor  # off: plain torch again
    for got in shards(y):
        torch.testing.assert_close(got, torch.full((3,), 2.0))


def test_activate_inside_a_dispatch_mode_of_the_users_stacks_on_it(mesh):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counting.ops += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        with mesh.activate():
            x = torch.ones(3) * 2
        assert type(torch.ones(2)) is torch.Tensor and Counting.ops > 0  # the user's mode again
    assert torch._C._len_torch_dispatch_stack() == 0
    for got in shards(x):
        torch.testing.assert_close(got, torch.full((3,), 2.0))


def test_the_native_path_is_left_alone_under_another_torch_than_its_own(monkeypatch):
    from crown import _aten_torch
    from crown.tensor import _native

    assert _aten_torch.matches(torch) and _native.USABLE  # this build's own torch

    class OtherTorch:  # a pip torch in a virtual environment
        __version__ = "2.1.0"

        class _C:
            __file__ = "/venv/lib/python3.11/site-packages/torch/_C.so"

    assert not _aten_torch.matches(OtherTorch)
    monkeypatch.setattr(_aten_torch, "VERSION", "2.1.0")
    with pytest.warns(UserWarning, match="the engines run torch ops in Python"):
        assert not _native._usable()


# --- recording, factories, fake metadata ------------------------------------


def test_factories_record_with_fake_metadata(mesh):
    with mesh.activate():
        x = torch.rand(3, 4)
        z = torch.zeros(2, 5, dtype=torch.float64)
        a = torch.arange(6)
        e = torch.empty(4)
        f = torch.full((2, 2), 7.0)
    assert isinstance(x, ct.Tensor) and x.shape == (3, 4) and x.dtype == torch.float32
    assert z.dtype == torch.float64 and a.dtype == torch.int64 and e.shape == (4,)
    assert x._fake.shape == (3, 4)
    assert x._location.endswith(":%d" % (test_factories_record_with_fake_metadata.__code__.co_firstlineno + 2))
    ref = per_rank_reference(lambda: torch.rand(3, 4))
    for got, want in zip(shards(x), ref):
        torch.testing.assert_close(got, want)
    assert not torch.equal(inspect(x, procs=0), inspect(x, procs=1))  # a different shard per rank
    for s in shards(a):
        assert torch.equal(s, torch.arange(6))
    assert torch.equal(inspect(f, hosts=1), torch.full((2, 2), 7.0))


def test_commands_are_recorded_then_run_on_flush(mesh):
    b = mesh.backend
    with mesh.activate():
        x = torch.ones(2, 2)
        y = x + 1
        assert b.pending and all(type(c) is _commands.Call for c in b.pending)
        calls = list(b.pending)
        assert calls[1].inputs == [x._ref] and calls[1].results == [y._ref]
        assert b.live_refs() == 0  # nothing has run yet
    assert not b.pending  # leaving activate() flushed
    assert b.live_refs() >= 2


def test_arithmetic_matches_local_torch(mesh):
    def program():
        x = torch.rand(4, 3)
        y = torch.randn(3, 5)
        w = (x * 2 - 1) / 3 + x.exp().log()
        m = (w @ y).relu()
        return m.sum(), m.mean(dim=0), torch.cat([w, x], dim=1).t()

    with mesh.activate():
        out = program()
    ref = per_rank_reference(program)
    for k in range(3):
        for got, want in zip(shards(out[k]), (r[k] for r in ref)):
            torch.testing.assert_close(got, want)
    assert out[2].shape == (6, 4)


def test_torch_tensor_inside_activate_is_sent_to_every_rank(mesh):
    with mesh.activate():
        c = torch.tensor([1.0, 2.0, 3.0])
        d = c * c
    assert isinstance(c, ct.Tensor)
    for s in shards(d):
        assert torch.equal(s, torch.tensor([1.0, 4.0, 9.0]))


def test_inspect_result_is_local_and_usable_inside_activate(mesh):
    with mesh.activate():
        x = torch.ones(2)
        local = inspect(x)
        assert type(local) is torch.Tensor
        assert repr(local)  # printing a fetched tensor inside activate() works
        assert (local + 1).tolist() == [2.0, 2.0]  # local math on it runs here


# --- in place, views, out= --------------------------------------------------


def test_in_place_ops_keep_the_ref(mesh):
    b = mesh.backend
    with mesh.activate():
        x = torch.zeros(3)
        ref = x._ref
        y = x.add_(2)
        assert y is x and x._ref == ref
        last = b.pending[-1]
        assert last.results == [ref] and last.inputs == [ref]  # redefines, no new ref
        x.mul_(3)
        o = torch.empty(3)
        r = torch.add(x, 1, out=o)
        assert r is o and b.pending[-1].results == [o._ref]
        x.zero_()
    assert torch.equal(inspect(x), torch.zeros(3))
    assert torch.equal(inspect(o, hosts=1, procs=1), torch.full((3,), 7.0))


def test_repeated_ops_use_the_cache_and_stay_right(mesh):
    b = mesh.backend
    with mesh.activate():
        ws = [torch.zeros(3), torch.zeros(3)]
        for _ in range(3):  # returns None, writes its list: recorded once per call
            torch._foreach_add_(ws, 1.0)
        n = len(b.pending)
        torch._foreach_add_(ws, 1.0)
        assert len(b.pending) == n + 1 and sorted(b.pending[-1].results) == sorted(w._ref for w in ws)
        x = torch.ones(2, dtype=torch.int64)
        y = x + 1      # int
        z = x + 1.0    # float: a different key, 1 == 1.0 notwithstanding
        y2 = x + 1
        assert y.dtype == y2.dtype == torch.int64 and z.dtype == torch.float32
        a, b2 = torch.ones(4).split(2)  # a tuple out of the cache
        a2, b3 = torch.ones(4).split(2)
    assert torch.equal(inspect(ws[1], procs=1), torch.full((3,), 4.0))
    assert torch.equal(inspect(z), torch.full((2,), 2.0)) and inspect(y2).dtype == torch.int64
    assert b3.shape == (2,) and b3._fake.shape == (2,) and b3._ref != b2._ref


def test_in_place_op_changing_the_shape_is_refused(mesh):
    with mesh.activate():
        x = torch.zeros(2, 3)
        with pytest.raises(ct.RecordError, match="out-of-place"):
            x.t_()


def test_views_alias_on_workers(mesh):
    with mesh.activate():
        x = torch.zeros(2, 3)
        v = x.view(6)
        t = x.t()
        d = x.detach()
        assert len({x._ref, v._ref, t._ref, d._ref}) == 4
        v.add_(1)
        t[0].fill_(5)
    want = torch.ones(2, 3)
    want[:, 0] = 5
    assert torch.equal(inspect(x), want)
    assert torch.equal(inspect(d, procs=1), want)


# --- reductions ---------------------------------------------------------------


def np_reduce(stack, reduction):
    return {"sum": stack.sum(0), "avg": stack.mean(0), "min": stack.min(0), "max": stack.max(0),
            "product": stack.prod(0)}[reduction]


def groups(dims):
    """rank lists reduced together, ordered row-major by their coords along
    dims, in the mesh's order of the dims (whatever order they were named in)."""
    dims = tuple(d for d in COORDS[0] if d in dims)
    out = {}
    for rank, c in enumerate(COORDS):
        key = tuple(v for k, v in c.items() if k not in dims)
        out.setdefault(key, []).append((tuple(c[d] for d in dims), rank))
    return [[r for _, r in sorted(g)] for g in out.values()]


@pytest.mark.parametrize("dims", [("hosts",), ("procs",), ("hosts", "procs"), ("procs", "hosts")])
@pytest.mark.parametrize("reduction", ["sum", "avg", "min", "max", "product", "stack"])
def test_reduce_against_numpy(mesh, dims, reduction):
    with mesh.activate():
        x = torch.rand(4, 3) + 0.5
        r = x.reduce(dims, reduction=reduction)
    src = [s.numpy() for s in shards(x)]
    got = shards(r)
    for g in groups(dims):
        stack = np.stack([src[k] for k in g])
        want = stack if reduction == "stack" else np_reduce(stack, reduction)
        for k in g:
            np.testing.assert_allclose(got[k].numpy(), want, rtol=1e-6)
    if reduction == "stack":
        assert r.shape == (4, 4, 3) if len(dims) == 2 else r.shape == (2, 4, 3)


@pytest.mark.parametrize("dims", [("hosts",), ("procs",), ("hosts", "procs")])
@pytest.mark.parametrize("reduction", ["sum", "avg", "max"])
def test_reduce_scatter(mesh, dims, reduction):
    with mesh.activate():
        x = torch.rand(8, 2)
        r = x.reduce(dims, reduction=reduction, scatter=True)
    n = 4 if len(dims) == 2 else 2
    assert r.shape == (8 // n, 2)
    src = [s.numpy() for s in shards(x)]
    got = shards(r)
    for g in groups(dims):
        full = np_reduce(np.stack([src[k] for k in g]), reduction)
        for i, k in enumerate(g):
            np.testing.assert_allclose(got[k].numpy(), np.split(full, n)[i], rtol=1e-6)


def test_stack_scatter_is_all_to_all(mesh):
    with mesh.activate():
        x = torch.rand(2, 3)
        r = x.reduce("procs", reduction="stack", scatter=True)
    src = shards(x)
    got = shards(r)
    for g in groups(("procs",)):
        for i, k in enumerate(g):
            want = torch.cat([src[j][i:i + 1] for j in g])
            torch.testing.assert_close(got[k], want)


def test_reduce_in_place(mesh):
    b = mesh.backend
    with mesh.activate():
        x = torch.rand(3)
        before = shards(x)
        v = x.view(3)
        ref = x._ref
        y = x.reduce_("procs", reduction="sum")
        assert y is x and x._ref == ref
        last = b.pending[-1]
        assert type(last) is _commands.Reduce and last.result == last.source == ref
    after = shards(x)
    for g in groups(("procs",)):
        want = before[g[0]] + before[g[1]]
        for k in g:
            torch.testing.assert_close(after[k], want)
    torch.testing.assert_close(inspect(v), after[0])  # the view saw it: same storage
    with mesh.activate():
        with pytest.raises(ReduceArgumentError):
            x.reduce_("procs", reduction="stack")


def test_reduce_argument_errors(mesh):
    with mesh.activate():
        x = torch.rand(3)
        with pytest.raises(ReduceArgumentError, match="unknown mesh dim"):
            x.reduce("gpus")
        with pytest.raises(ReduceArgumentError, match="not one of"):
            x.reduce("procs", reduction="median")
        with pytest.raises(ReduceArgumentError, match="equal chunks"):
            x.reduce("procs", scatter=True)


# --- autograd and training ---------------------------------------------------


def test_backward_records_and_matches_local(mesh):
    def program():
        w = torch.rand(3, 2)
        w.requires_grad_(True)
        x = torch.rand(5, 3)
        loss = (x @ w).tanh().pow(2).sum()
        loss.backward()
        return w, loss

    with mesh.activate():
        w, loss = program()
    assert isinstance(w.grad, ct.Tensor)
    ref = per_rank_reference(program)
    for k, c in enumerate(COORDS):
        torch.testing.assert_close(inspect(w.grad, **c), ref[k][0].grad)
        torch.testing.assert_close(inspect(loss, **c), ref[k][1].detach())


N_DATA, D_IN, D_HID = 32, 5, 8


def _data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N_DATA, D_IN, generator=g)
    y = (x @ torch.randn(D_IN, 1, generator=g)).sin()
    return x, y


# Adam and AdamW read their step count with .item(): a tensor the controller
# knows (made from torch.tensor(0.) alone), so no fetch is needed.
OPTIMIZERS = {"sgd": (torch.optim.SGD, 0.2), "adam": (torch.optim.Adam, 0.02),
              "adamw": (torch.optim.AdamW, 0.02)}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_data_parallel_mlp_matches_full_batch_local(mesh, optimizer):
    x_all, y_all = _data()
    steps = 20
    make_opt, lr = OPTIMIZERS[optimizer]
    losses = []
    with mesh.activate():
        model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(),
                                    torch.nn.Linear(D_HID, 1))
        with torch.no_grad():  # one model on every rank (each initialised its own)
            for p in model.parameters():
                p.reduce_(("hosts", "procs"), reduction="avg")
        init = [inspect(p) for p in model.parameters()]
        opt = make_opt(model.parameters(), lr=lr)
        # Each rank takes its quarter of the batch.
        shard = mesh.rank(("hosts", "procs"))
        xs = torch.tensor(x_all.numpy()).view(4, N_DATA // 4, D_IN)
        ys = torch.tensor(y_all.numpy()).view(4, N_DATA // 4, 1)
        xb = torch.index_select(xs, 0, shard.view(1)).squeeze(0)
        yb = torch.index_select(ys, 0, shard.view(1)).squeeze(0)
        for _ in range(steps):
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            for p in model.parameters():
                p.grad.reduce_(("hosts", "procs"), reduction="avg")
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().reduce(("hosts", "procs"), reduction="avg"))
        final = [inspect(p) for p in model.parameters()]
        curve = [inspect(v).item() for v in losses]
        other = [inspect(p, hosts=1, procs=1) for p in model.parameters()]

    local = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(),
                                torch.nn.Linear(D_HID, 1))
    with torch.no_grad():
        for p, v in zip(local.parameters(), init):
            p.copy_(v)
    opt = make_opt(local.parameters(), lr=lr)
    local_curve = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(local(x_all), y_all)
        loss.backward()
        opt.step()
        opt.zero_grad()
        local_curve.append(loss.item())
    for got, p in zip(final, local.parameters()):
        torch.testing.assert_close(got, p.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(final, other):
        torch.testing.assert_close(a, b)  # every rank holds the same model
    np.testing.assert_allclose(curve, local_curve, rtol=1e-4)
    assert curve[-1] < curve[0]


# --- record-time errors --------------------------------------------------------


def _unchanged(mesh, fn, exc, match=None):
    before = mesh.backend.commands + len(mesh.backend.pending)
    with pytest.raises(exc, match=match) as info:
        fn()
    assert mesh.backend.commands + len(mesh.backend.pending) == before, "something was recorded"
    return info.value


def test_error_local_tensor_mixed(mesh):
    local = torch.ones(3)
    with mesh.activate():
        x = torch.ones(3)
        e = _unchanged(mesh, lambda: x + local, LocalTensorError, "local torch tensor")
        assert "activate()" in str(e)


def test_error_two_meshes(mesh):
    other = Mesh(LocalBackend(SHAPE))
    with mesh.activate():
        x = torch.ones(3)
    with other.activate():
        y = torch.ones(3)
    _unchanged(mesh, lambda: x + y, MeshMismatchError, "two meshes")
    with other.activate():
        _unchanged(mesh, lambda: x * 2, MeshMismatchError, "is active")


def test_error_dropped_tensor(mesh):
    with mesh.activate():
        x = torch.ones(3)
        x.drop()
        assert x.dropped
        _unchanged(mesh, lambda: x + 1, DroppedTensorError, "drop")
        with pytest.raises(DroppedTensorError):
            inspect(x)


def test_error_mismatched_shapes(mesh):
    with mesh.activate():
        a = torch.ones(3, 4)
        b = torch.ones(5, 6)
        e = _unchanged(mesh, lambda: a @ b, ShapeError, r"\[3, 4\]")
        assert "aten::mm" in str(e)
        c = torch.ones(2)
        _unchanged(mesh, lambda: a + c, ShapeError)
        _unchanged(mesh, lambda: a + b, ShapeError)


def test_error_collective_on_requires_grad(mesh):
    with mesh.activate():
        w = torch.ones(3).requires_grad_(True)
        y = w * 2
        _unchanged(mesh, lambda: w.reduce("procs"), CollectiveGradError, "requires grad")
        _unchanged(mesh, lambda: y.reduce_("procs"), CollectiveGradError)
        y.detach().reduce("procs")  # the remedy works


def test_error_needs_values(mesh):
    with mesh.activate():
        x = torch.ones(3)
        total = x.sum()
        _unchanged(mesh, lambda: total.item(), LocalValueError, "inspect")
        _unchanged(mesh, lambda: x.tolist(), LocalValueError)
        _unchanged(mesh, lambda: x.numpy(), LocalValueError)
        assert "crown.Tensor" in f"{x.sum()}"  # formatting does not fetch
        positive = x.sum() > 0
        _unchanged(mesh, lambda: bool(positive), LocalValueError)
        _unchanged(mesh, lambda: torch.equal(x, x), LocalValueError)


def test_an_op_seen_before_is_recorded_before_the_dispatcher_unless_autograd_needs_it(
        mesh, monkeypatch):
    from crown.tensor import _op_cache
    through = []
    real = _op_cache._disabled

    def counted(func, types, args, kwargs):
        through.append(func)
        return real(func, types, args, kwargs)

    monkeypatch.setattr(_op_cache, "_disabled", counted)
    with mesh.activate():
        z = torch.ones(4)
        for _ in range(3):
            z = z * 0.5 + 1  # learnt on the first pass, then straight from __torch_function__
        assert [f.__name__ for f in through] == ["mul", "add"]
        w = torch.ones(4).requires_grad_(True)
        for _ in range(2):
            y = w * 0.5  # autograd must see it, every time
            assert y.grad_fn is not None
        assert [f.__name__ for f in through].count("mul") == 3
    np.testing.assert_allclose(inspect(z).numpy(), [1.875] * 4)  # 1 -> 1.5 -> 1.75 -> 1.875


def test_values_made_from_constants_alone_are_known_on_the_controller(mesh):
    with mesh.activate():
        step = torch.tensor(3.0)  # the same on every rank
        step += 1
        assert step.item() == 4.0 and bool(step > 2)  # no fetch
        assert inspect(step).item() == 4.0  # and the workers agree
        step.add_(torch.ones(()))  # a write from a tensor it does not know
        _unchanged(mesh, lambda: step.item(), LocalValueError)
        summed = torch.tensor(1.0)
        summed.reduce_("procs")  # a collective: each rank's value changes
        _unchanged(mesh, lambda: summed.item(), LocalValueError)
        big = torch.tensor([float(i) for i in range(100)]).sum()  # data, not bookkeeping
        _unchanged(mesh, lambda: big.item(), LocalValueError)
        drawn = torch.tensor([0.5]).bernoulli()  # random: each rank draws its own
        _unchanged(mesh, lambda: drawn.item(), LocalValueError)


def test_outside_activate(mesh):
    with mesh.activate():
        x = torch.ones(3)
    y = x + 1  # outside activate(): ops on mesh tensors still record on their mesh
    assert isinstance(y, ct.Tensor)
    assert type(torch.ones(2)) is torch.Tensor  # factories are local again
    make = remote(helpers.make_ones)
    _unchanged(mesh, lambda: make(2), NoMeshError, "activate")
    scale = remote(helpers.scale_rows)
    _unchanged(mesh, lambda: scale(torch.ones(2), 2), LocalTensorError, "remote function")


# --- deferred errors -------------------------------------------------------------


def test_deferred_error_poisons_dependents_only(mesh):
    bad = remote(helpers.fails, propagate=helpers.fails_shape)
    with mesh.activate():
        x = torch.ones(3)
        y = bad(x)
        line = test_deferred_error_poisons_dependents_only.__code__.co_firstlineno + 4
        z = (y + 1).sum()
        ok = x * 2
    with pytest.raises(RemoteException) as info:
        inspect(z, procs=1)
    e = info.value
    assert e.op == "tensor_helpers.fails" and e.rank == 1
    assert "deliberate failure" in e.message and "ValueError" in e.traceback
    assert e.location.endswith(f"test_tensor_record.py:{line}")
    assert torch.equal(inspect(ok), torch.full((3,), 2.0))  # independent refs stay fetchable
    with mesh.activate():
        r = z.reduce("procs")  # a collective on a poisoned ref fails, it does not hang
        fine = ok.reduce("procs")
    with pytest.raises(RemoteException):
        inspect(r)
    assert torch.equal(inspect(fine), torch.full((3,), 4.0))


def test_worker_op_failure_is_a_remote_exception(mesh):
    with mesh.activate():
        x = torch.ones(3, dtype=torch.int64)
        i = torch.tensor([7])  # an out-of-range index: shapes are fine, values are not
        y = x.index_select(0, i)
    with pytest.raises(RemoteException) as info:
        inspect(y)
    assert info.value.op == "aten::index_select.default" and "index" in info.value.message


# --- remote ------------------------------------------------------------------------


def test_a_propagate_that_returns_its_input_still_makes_a_new_tensor(mesh):
    # `propagate=lambda x: x` says "shaped like x"; the function's output is
    # its own tensor, not x written in place.
    doubled = remote(helpers.double, propagate=lambda x: x)
    with mesh.activate():
        x = torch.ones(3)
        y = doubled(x)
    assert y._ref != x._ref
    torch.testing.assert_close(inspect(y), torch.full((3,), 2.0))
    torch.testing.assert_close(inspect(x), torch.ones(3))


def test_remote_callable_and_dotted_path(mesh):
    scale = remote(helpers.scale_rows, propagate=helpers.scale_rows_shape)
    halves = remote("tensor_helpers.split_halves",
                    propagate=lambda x: (x[: x.shape[0] // 2], x[x.shape[0] // 2:]))
    own = remote(helpers.split_halves)  # its own propagator: plain torch code
    with mesh.activate():
        x = torch.rand(4, 2)
        s = scale(x, 3.0)
        a, b = halves(x)
        c, d = own(s)
    assert a.shape == (2, 2) and c.shape == (2, 2)
    for k, cc in enumerate(COORDS):
        xs = inspect(x, **cc)
        torch.testing.assert_close(inspect(s, **cc), xs * 3)
        torch.testing.assert_close(inspect(b, **cc), xs[2:])
        torch.testing.assert_close(inspect(c, **cc), xs[:2] * 3)
    by_value = remote(lambda x: x * 2)  # not importable by path: cloudpickled, as in Monarch
    with mesh.activate():
        twice = by_value(x)
    torch.testing.assert_close(inspect(twice), inspect(x) * 2)


def test_remote_cached_and_inspect_propagation(mesh, tmp_path):
    top = remote("tensor_helpers.top_and_count")  # a dotted path: "cached" by default
    note = remote(helpers.note, propagate="inspect")
    with mesh.activate():
        x = torch.rand(3, 4)
        values, count = top(x, 2)  # learnt by running it on the first proc
        again, _ = top(x * 2, 2)  # the same metadata: no second probe
        assert note(x, str(tmp_path / "notes")) is None
    assert values.shape == (2,) and count == 12 and len(top._learnt) == 1
    for c in COORDS:
        torch.testing.assert_close(inspect(values, **c), torch.topk(inspect(x, **c).flatten(), 2).values)
    written = (tmp_path / "notes").read_text().split()
    assert sorted(float(v) for v in written) == pytest.approx(
        sorted(float(inspect(x, **c).sum()) for c in COORDS))
    with pytest.raises(ValueError, match="the modes are"):
        remote("tensor_helpers.note", propagate="mocked")
    failing = remote("tensor_helpers.fails")
    with mesh.activate(), pytest.raises(RemoteException, match="deliberate failure"):
        failing(torch.ones(2))


def test_mesh_rank_builtin(mesh):
    with mesh.activate():
        h = mesh.rank("hosts")
        p = mesh.rank("procs")
        both = mesh.rank(("hosts", "procs"))
    for k, c in enumerate(COORDS):
        assert inspect(h, **c).item() == c["hosts"]
        assert inspect(p, **c).item() == c["procs"]
        assert inspect(both, **c).item() == k


# --- no_mesh -------------------------------------------------------------------------


def test_no_mesh_runs_locally(mesh):
    b = mesh.backend
    with mesh.activate():
        x = torch.ones(2)
        n = b.commands  # every command recorded so far
        with no_mesh:
            local = torch.ones(2) * 3
            assert type(local) is torch.Tensor and b.commands == n
            y = x + 1  # a mesh tensor's op records on its own mesh, as in Monarch
            assert b.commands == n + 1
            with pytest.raises(NoMeshError, match="inside no_mesh"):
                remote(helpers.make_ones)(2)  # nothing to take a mesh from
        assert isinstance(torch.ones(1), ct.Tensor)  # recording again
    torch.testing.assert_close(inspect(y), torch.full((2,), 2.0))


# --- lifetime -------------------------------------------------------------------------


def test_dead_tensors_are_deleted_on_workers(mesh):
    b = mesh.backend
    with mesh.activate():
        x = torch.ones(4)
        y = x + 1
        del y
        gc.collect()
    assert any(type(c) is _commands.Delete for c in b.pending) or b.live_refs() == 1
    assert b.live_refs() == 1  # only x is left


def test_thousand_step_loop_keeps_refs_bounded():
    backend = LocalBackend({"procs": 2})
    mesh = Mesh(backend)
    live, dead, objects = [], [], []
    with mesh.activate():
        w = torch.zeros(8, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.01)
        for step in range(1000):
            loss = ((w - 1.0) ** 2).sum()
            loss.backward()
            w.grad.reduce_("procs", reduction="avg")
            opt.step()
            opt.zero_grad()
            if step % 100 == 99:
                mesh.flush()
                live.append(backend.live_refs())
                dead.append(len(mesh._dead))
                gc.collect()
                objects.append(sum(1 for o in gc.get_objects() if type(o) is ct.Tensor))
    assert max(live) == min(live), live  # flat: nothing accumulates on the workers
    assert max(dead) <= 64
    assert max(objects) == min(objects), objects  # and on the controller
    torch.testing.assert_close(inspect(w), torch.full((8,), 1 - 0.98 ** 1000))


# --- cost -----------------------------------------------------------------------------


def test_recording_cost_per_op(capsys):
    mesh = Mesh(LocalBackend({"procs": 2}))
    with mesh.activate():
        x = torch.ones(16)
        z = x
        for _ in range(200):
            z = z + 1  # warm the caches
        n = 10_000
        t0 = time.perf_counter()
        for _ in range(n):
            z = z + 1
        us = (time.perf_counter() - t0) / n * 1e6
        mesh.backend.pending.clear()  # the cost measured is the controller's; skip the run
    with capsys.disabled():
        print(f"\n[recording] {us:.1f} us per elementwise op at the controller (10,000 ops)")


# --- streams and borrows ---------------------------------------------------------


def test_a_tensor_is_used_on_its_own_stream_or_borrowed(mesh):
    other = ct.Stream("other")
    with mesh.activate():
        x = torch.ones(4)
        with other.activate():
            with pytest.raises(ct.StreamError, match="borrow it there first"):
                x + 1  # noqa: B018
            b = other.borrow(x)
            with pytest.raises(ct.StreamError):
                other.borrow(b)  # already this stream's
        with other.activate():
            y = b * 3
        b.drop()
        z = x + 1  # the main stream again
    torch.testing.assert_close(inspect(y), torch.full((4,), 3.0))
    torch.testing.assert_close(inspect(z), torch.full((4,), 2.0))


def test_a_shared_borrow_is_written_by_nobody_until_dropped(mesh):
    other = ct.Stream("readers")
    with mesh.activate():
        x = torch.ones(4)
        b = other.borrow(x)
        with pytest.raises(ct.BorrowedTensorError, match="borrowed for reading"):
            x.add_(1)
        with pytest.raises(ct.BorrowedTensorError):
            x.reduce_("procs")
        y = x * 2  # the lender may still read it
        with other.activate():
            with pytest.raises(ct.BorrowedTensorError):
                b.mul_(2)
            c = b + 1
        b.drop()
        x.add_(1)  # returned: writable again
    torch.testing.assert_close(inspect(c), torch.full((4,), 2.0))
    torch.testing.assert_close(inspect(y), torch.full((4,), 2.0))
    torch.testing.assert_close(inspect(x), torch.full((4,), 2.0))


def test_a_mutable_borrow_keeps_the_lender_off_and_its_writes_come_back(mesh):
    comms = ct.Stream("comms")
    with mesh.activate():
        g = torch.ones(4)
        b = comms.borrow(g, mutable=True)
        with pytest.raises(ct.BorrowedTensorError, match="lent mutably"):
            g + 1  # noqa: B018
        with pytest.raises(ct.BorrowedTensorError, match="already lent"):
            comms.borrow(g)
        with comms.activate():
            b.reduce_(("hosts", "procs"), reduction="sum")  # the overlap pattern of Monarch
        b.drop()
        h = g * 1
    torch.testing.assert_close(inspect(h), torch.full((4,), 4.0))


def test_a_borrow_that_dies_goes_back_to_its_lender(mesh):
    other = ct.Stream("brief")
    with mesh.activate():
        x = torch.ones(2)
        b = other.borrow(x, mutable=True)
        with other.activate():
            b.add_(1)
        del b
        gc.collect()
        x.add_(1)
    torch.testing.assert_close(inspect(x), torch.full((2,), 3.0))
