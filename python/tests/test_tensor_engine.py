"""crown.tensor on real ranks (mpirun -n 4): recorded torch code run by the
C++ engines, collectives over MPI against numpy references computed from
the fetched shards, deferred errors with their root cause, record-time
errors, and refs freed on every rank as the controller's tensors die."""

import numpy as np
import pytest
import torch

import crown
from crown.actor import Actor, current_rank, endpoint
from crown.tensor import RemoteException, _native, fetch_shard, inspect, remote
from crown.tensor.errors import CollectiveGradError, LocalTensorError


def grid():
    """The four ranks as {dp: 2, tp: 2}."""
    return crown.world().flatten("ranks").split(ranks=(("dp", 2), ("tp", 2)))


def shards(t, mesh):
    return {(dp, tp): fetch_shard(t, dp=dp, tp=tp).get(timeout=30).numpy()
            for dp in range(2) for tp in range(2)}


def test_recorded_ops_run_on_every_rank_on_its_own_shard():
    procs = grid()
    with procs.activate():
        x = torch.rand(32, 32)
        y = (x @ x).relu().sum()
    xs, ys = shards(x, procs), shards(y, procs)
    assert len({float(v.sum()) for v in xs.values()}) == 4, "every rank drew the same numbers"
    for key in xs:
        want = torch.from_numpy(xs[key]) @ torch.from_numpy(xs[key])
        np.testing.assert_allclose(ys[key], want.relu().sum().numpy(), rtol=1e-5)


GROUPS = {"dp": lambda dp, tp: [(d, tp) for d in range(2)],
          "tp": lambda dp, tp: [(dp, t) for t in range(2)],
          ("dp", "tp"): lambda dp, tp: [(d, t) for d in range(2) for t in range(2)]}
FOLD = {"sum": lambda a: a.sum(0), "avg": lambda a: a.mean(0), "min": lambda a: a.min(0),
        "max": lambda a: a.max(0), "product": lambda a: a.prod(0)}


@pytest.mark.parametrize("dims", list(GROUPS), ids=str)
@pytest.mark.parametrize("reduction", list(FOLD))
def test_reduce_over_each_dimension_and_both_matches_numpy(dims, reduction):
    procs = grid()
    with procs.activate():
        x = torch.rand(4, 6, dtype=torch.float64) + 0.5
        r = x.reduce(dims, reduction=reduction)
    xs, rs = shards(x, procs), shards(r, procs)
    for key, got in rs.items():
        members = np.stack([xs[m] for m in GROUPS[dims](*key)])
        np.testing.assert_allclose(got, FOLD[reduction](members), rtol=1e-12)


@pytest.mark.parametrize("dims", list(GROUPS), ids=str)
def test_stack_scatter_and_all_to_all_match_numpy(dims):
    procs = grid()
    with procs.activate():
        x = torch.rand(4, 3, dtype=torch.float64)
        stacked = x.reduce(dims, reduction="stack")
        scattered = x.reduce(dims, reduction="sum", scatter=True)
        exchanged = x.reduce(dims, reduction="stack", scatter=True)
    xs = shards(x, procs)
    got_stack, got_scatter, got_a2a = (shards(t, procs) for t in (stacked, scattered, exchanged))
    for key in xs:
        group = GROUPS[dims](*key)
        n, me = len(group), group.index(key)
        members = np.stack([xs[m] for m in group])
        np.testing.assert_array_equal(got_stack[key], members)
        np.testing.assert_allclose(got_scatter[key], np.split(members.sum(0), n)[me], rtol=1e-12)
        np.testing.assert_array_equal(
            got_a2a[key], np.concatenate([np.split(xs[m], n)[me] for m in group]))


def test_reduce_in_place_changes_the_tensor_itself():
    procs = grid()
    with procs.activate():
        x = torch.ones(5)
        view = x[1:3]
        x.reduce_(("dp", "tp"), reduction="sum")
    np.testing.assert_array_equal(inspect(x).numpy(), np.full(5, 4.0))
    np.testing.assert_array_equal(inspect(view).numpy(), np.full(2, 4.0))  # views see it too


def fails_on_rank_two(x, rank):
    if int(rank) == 2:
        raise ValueError("rank two has no data")
    return x * 2


def first_rows(x, n):
    return x[:n].clone(), x.shape[0]


def test_remote_by_dotted_path_learns_its_outputs_on_the_first_proc():
    procs = grid()
    rows = remote(f"{__name__}.first_rows")  # no propagate: "cached"
    with procs.activate():
        x = torch.rand(5, 3, dtype=torch.float64)
        head, total = rows(x, 2)
    assert head.shape == (2, 3) and head.dtype == torch.float64 and total == 5
    for key, shard in shards(x, procs).items():
        np.testing.assert_array_equal(
            fetch_shard(head, dp=key[0], tp=key[1]).get(timeout=30).numpy(), shard[:2])


def test_a_failure_on_one_rank_surfaces_at_fetch_with_its_cause():
    procs = grid()
    with procs.activate():
        x = torch.ones(3)
        rank = procs.tensors().rank(("dp", "tp"))
        y = remote(fails_on_rank_two, propagate=lambda x, rank: x)(x, rank)
        z = y + 1                               # depends on the failure
        total = y.reduce(("dp", "tp"))          # a collective over it does not hang
        fine = x + 1                            # independent: fetchable
    with pytest.raises(RemoteException) as failed:
        fetch_shard(z, dp=1, tp=0).get(timeout=30)
    e = failed.value
    assert e.rank == 2 and "fails_on_rank_two" in e.op and "rank two has no data" in e.message
    assert "test_tensor_engine.py" in e.location and "raise ValueError" in e.traceback
    with pytest.raises(RemoteException, match="rank 2"):
        fetch_shard(total, dp=0, tp=0).get(timeout=30)
    np.testing.assert_array_equal(fetch_shard(z, dp=0, tp=0).get(timeout=30).numpy(), [3.0] * 3)
    np.testing.assert_array_equal(inspect(fine).numpy(), [2.0] * 3)


def test_record_time_errors_are_raised_before_anything_is_sent():
    procs = grid()
    local = torch.ones(3)
    with procs.activate():
        x = torch.ones(3)
        with pytest.raises(LocalTensorError):
            x + local  # noqa: B018
        w = torch.ones(3, requires_grad=True)
        with pytest.raises(CollectiveGradError):
            w.reduce("dp")
        with pytest.raises(Exception, match="(?i)shape|size"):
            x @ torch.ones(4, 4)  # noqa: B018


def test_a_long_loop_keeps_the_workers_refs_flat():
    procs = grid()
    mesh = procs.tensors()
    with procs.activate():
        w = torch.zeros(8)
        for step in range(300):
            w = w + torch.rand(8) * 0.01
    before = mesh.backend.sync()
    with procs.activate():
        for step in range(1000):
            w = (w * 0.5 + torch.rand(8)).relu()
    after = mesh.backend.sync()
    for b, a in zip(before, after):
        assert a["refs"] <= b["refs"] + 70, (before, after)  # 64 deaths batch into one Delete
    assert inspect(w).shape == (8,)


def test_a_comms_stream_reduces_borrowed_gradients_beside_the_main_stream():
    from crown.tensor import Stream

    procs = grid()
    comms = Stream("comms")
    with procs.activate():
        grads = [torch.rand(64, dtype=torch.float64) for _ in range(4)]
        lent = [comms.borrow(g, mutable=True) for g in grads]
        with comms.activate():
            for b in lent:
                b.reduce_(("dp", "tp"), reduction="sum")
        busy = torch.rand(128, 128) @ torch.rand(128, 128)  # the main stream meanwhile
        for b in lent:
            b.drop()
        after = [g * 1 for g in grads]  # the main stream, after the returns
    for g, a in zip(grads, after):
        ranks = [fetch_shard(g, dp=d, tp=t).get(timeout=30).numpy() for d in range(2) for t in range(2)]
        for shard in ranks:
            np.testing.assert_allclose(shard, ranks[0])  # every rank holds the sum
        np.testing.assert_allclose(inspect(a).numpy(), ranks[0])
    assert inspect(busy).shape == (128, 128)


class ShardUser(Actor):
    @endpoint
    def busy(self, seconds):
        import time
        time.sleep(seconds)

    @endpoint
    def total(self, shard):
        assert type(shard) is torch.Tensor  # this rank's shard, a plain torch tensor
        return float(shard.sum())

    @endpoint
    def keep(self, shard):
        self.__dict__.setdefault("sums", []).append(float(shard.sum()))

    @endpoint
    def kept(self):
        return self.__dict__.get("sums", [])

    @endpoint
    def make(self, n):
        rank = current_rank().rank
        return torch.full((n,), float(rank))


def test_actors_get_their_ranks_shard_and_rref_makes_a_mesh_tensor():
    procs = grid()
    users = procs.spawn("shard-users", ShardUser)
    with procs.activate():
        x = torch.rand(8, dtype=torch.float64)
    totals = users.total.call(x).get(timeout=30)
    for point, value in totals.items():
        want = fetch_shard(x, dp=point["dp"], tp=point["tp"]).get(timeout=30).sum()
        assert value == pytest.approx(float(want))
    made = users.make.rref(3)  # each actor's tensor, kept on its rank
    with procs.activate():
        total = (made * 2).reduce(("dp", "tp"))
    np.testing.assert_array_equal(inspect(total).numpy(), [2.0 * (0 + 1 + 2 + 3)] * 3)
    np.testing.assert_array_equal(fetch_shard(made, dp=1, tp=1).get(timeout=30).numpy(), [3.0] * 3)


def test_a_tensor_made_for_a_call_lives_until_the_call_is_answered():
    procs = grid()
    users = procs.spawn("busy-shard-users", ShardUser)
    with procs.activate():
        x = torch.ones(8, dtype=torch.float64)
    users.busy.broadcast(0.5)  # the actors read their shards after this
    pending = users.total.call(x * 2)  # a temporary: the caller keeps no reference
    procs.tensors().flush()  # what the controller dropped goes to the engines now
    totals = pending.get(timeout=30)
    assert sorted(totals.values()) == [16.0] * 4


def test_a_tensor_sent_with_no_future_kept_lives_until_every_actor_has_read_it():
    from crown import _sent

    procs = grid()
    mesh = procs.tensors()
    users = procs.spawn("lent-shard-users", ShardUser)
    with procs.activate():
        x = torch.ones(8, dtype=torch.float64)
    before = mesh.backend.sync()
    users.busy.broadcast(0.5)  # the actors read their shards after this
    # Temporaries that the caller drops at once, with every adverb's Future.
    users.keep.broadcast(x * 2)
    users.keep.call(x * 3)
    users.keep.stream(x * 4)
    users.slice(dp=0, tp=1).keep.call_one(x * 5)
    procs.tensors().flush()  # what the controller dropped goes to the engines now
    sums = users.kept.call().get(timeout=30)
    for point, got in sums.items():
        want = [16.0, 24.0, 32.0] + ([40.0] if (point["dp"], point["tp"]) == (0, 1) else [])
        assert got == want, (point, got)
    # Once the actors have read them, the tensors die and their refs go.
    procs.tensors().flush()
    assert _sent.held() == 0
    after = mesh.backend.sync()
    for b, a in zip(before, after):
        assert a["refs"] <= b["refs"], (before, after)


def test_slice_mesh_and_to_mesh_hand_shards_to_meshes_of_the_same_procs():
    procs = grid()
    with procs.activate():
        x = torch.rand(4, dtype=torch.float64)
    shards_of_x = shards(x, procs)
    row = x.slice_mesh(dp=1)  # ranks 2 and 3, as {tp: 2}
    assert row.mesh is procs.slice(dp=1).tensors()
    with procs.slice(dp=1).activate():
        total = row.reduce("tp")
    np.testing.assert_allclose(inspect(total).numpy(), shards_of_x[(1, 0)] + shards_of_x[(1, 1)])
    flat = crown.world_flat()  # the same four procs, as {ranks: 4}: each keeps its own shard
    moved = x.to_mesh(flat)
    with flat.activate():
        everything = moved.reduce("ranks")
    np.testing.assert_allclose(inspect(everything).numpy(), sum(shards_of_x.values()))
    np.testing.assert_array_equal(fetch_shard(moved, ranks=3).get(timeout=30).numpy(),
                                  shards_of_x[(1, 1)])
    with procs.activate():
        x.add_(1)  # to_mesh copied; slice_mesh is a view
    np.testing.assert_array_equal(fetch_shard(moved, ranks=3).get(timeout=30).numpy(),
                                  shards_of_x[(1, 1)])
    np.testing.assert_array_equal(fetch_shard(row, tp=1).get(timeout=30).numpy(),
                                  shards_of_x[(1, 1)] + 1)
    # Monarch's functions, over a pytree: each mesh tensor moved, the rest kept.
    rows = crown.slice_mesh({"x": x, "label": "dp1"}, dp=1)
    assert rows["label"] == "dp1" and rows["x"].mesh is procs.slice(dp=1).tensors()
    np.testing.assert_array_equal(fetch_shard(rows["x"], tp=0).get(timeout=30).numpy(),
                                  shards_of_x[(1, 0)] + 1)
    (flat_x,) = crown.to_mesh((x,), flat)
    np.testing.assert_array_equal(fetch_shard(flat_x, ranks=0).get(timeout=30).numpy(),
                                  shards_of_x[(0, 0)] + 1)


def test_to_mesh_moves_shards_between_procs_by_coordinates_and_broadcasts():
    procs = grid()
    top, bottom = procs.slice(dp=0), procs.slice(dp=1)  # ranks 0, 1 and 2, 3, each {tp: 2}
    with top.activate():
        x = torch.rand(5, 3, dtype=torch.float64)
        t = x.t()  # not contiguous: it arrives as the same values
    xs = {tp: fetch_shard(x, tp=tp).get(timeout=30).numpy() for tp in range(2)}
    y, ty = x.to_mesh(bottom), t.to_mesh(bottom)  # rank 0 -> 2, rank 1 -> 3, over MPI
    assert y.mesh is bottom.tensors()
    with top.activate():
        x.mul_(0)  # after the move: y keeps the values it was sent
    for tp in range(2):
        np.testing.assert_array_equal(fetch_shard(y, tp=tp).get(timeout=30).numpy(), xs[tp])
        np.testing.assert_array_equal(fetch_shard(ty, tp=tp).get(timeout=30).numpy(), xs[tp].T)
    with bottom.activate():
        total = (y * 2).reduce("tp")
    np.testing.assert_allclose(inspect(total).numpy(), 2 * (xs[0] + xs[1]))
    # A shard too big for MPI's eager sends: the source waits for its receiver, which
    # must have its half of the move already (a fetch from the source does not hang).
    with top.activate():
        big = torch.ones(1 << 18)  # 1 MiB
    moved_big = big.to_mesh(bottom)
    assert float(inspect(big).sum()) == 1 << 18
    assert float(fetch_shard(moved_big, tp=1).get(timeout=30).sum()) == 1 << 18
    # Onto the whole grid, which has tp and also dp: copied along dp (Monarch's broadcast).
    everywhere = y.to_mesh(procs)
    got = shards(everywhere, procs)
    for (dp, tp), shard in got.items():
        np.testing.assert_array_equal(shard, xs[tp])


def test_each_mesh_of_a_proc_gives_its_own_coordinates():
    procs = grid()  # another mesh's engines on the same procs run torch ops first
    with procs.activate():
        first = torch.ones(1) * 2
    inspect(first)
    flat = crown.world_flat()
    with flat.activate():
        index = flat.tensors().rank("ranks")
    assert [int(fetch_shard(index, ranks=r).get(timeout=30)) for r in range(4)] == [0, 1, 2, 3]


def test_to_mesh_carries_a_failed_source_and_refuses_meshes_it_cannot_map():
    procs = grid()
    top, bottom = procs.slice(dp=0), procs.slice(dp=1)
    with procs.activate():
        rank = procs.tensors().rank(("dp", "tp"))
        y = remote(fails_on_rank_two, propagate=lambda x, rank: x)(torch.ones(3), rank)
    broken = y.slice_mesh(dp=1).to_mesh(top)  # rank 2's failure goes to rank 0 instead of data
    with pytest.raises(RemoteException) as failed:
        fetch_shard(broken, tp=0).get(timeout=30)
    assert failed.value.rank == 2 and "rank two has no data" in failed.value.message
    np.testing.assert_array_equal(fetch_shard(broken, tp=1).get(timeout=30).numpy(), [2.0] * 3)
    with top.activate():
        x = torch.ones(2)
    with pytest.raises(ValueError, match="holds no shard"):
        x.to_mesh(crown.world_flat().slice(ranks=slice(2, 4)))  # other labels, other procs


def native_counts():
    from crown import _aten  # rank 0's engine runs in this process

    return _aten.counts()


def test_the_engines_run_torch_ops_natively_with_the_results_python_gives():
    procs = grid()
    before = native_counts()
    with procs.activate():
        a = torch.rand(4, 6)
        b = torch.rand(4, 6)
        outs = {
            "scalar": a * 0.5 + 1,                               # a wrapped number
            "dims": (a - b).abs().sum(dim=1, keepdim=True),      # int[] and bool arguments
            "view_mm": a.t() @ b,                                # a view of a shard, then mm
            "dtype": a.to(torch.float64) * 2,                    # a dtype argument
            "mask": torch.where(a > 0.5, a, b),                  # a bool intermediate
            "slice": a[1:3, ::2],                                # slices: views
            "bf16": a.to(torch.bfloat16).float(),                # a type numpy lacks, inside
            "arange": torch.arange(6).reshape(2, 3) * 3,         # int64 factories
            "full": torch.full((2, 2), 3.5, dtype=torch.float64),
            "softmax": a.softmax(-1),
            "cat": torch.cat([a, b]),                            # a list of tensors
            "index": a[torch.arange(2)],                         # Tensor?[]: Python's path
            "numbers": (a * 0.1 + 0.3) / 7 - 2,                  # numbers cast to float32 ahead
            "int_number": (a * 3).div_(7).mul_(0.9),             # an int, and in place
            "bf16_number": (a.to(torch.bfloat16) * 0.1).float(), # bf16: left to TensorIterator
        }
        counter = torch.zeros(3, dtype=torch.int64)
        counter.add_(7)                                          # in place: the same ref
    want = {
        "scalar": lambda a, b: a * 0.5 + 1, "dims": lambda a, b: (a - b).abs().sum(1, keepdim=True),
        "view_mm": lambda a, b: a.t() @ b, "dtype": lambda a, b: a.double() * 2,
        "mask": lambda a, b: torch.where(a > 0.5, a, b), "slice": lambda a, b: a[1:3, ::2],
        "bf16": lambda a, b: a.bfloat16().float(),
        "arange": lambda a, b: torch.arange(6).reshape(2, 3) * 3,
        "full": lambda a, b: torch.full((2, 2), 3.5, dtype=torch.float64),
        "softmax": lambda a, b: a.softmax(-1), "cat": lambda a, b: torch.cat([a, b]),
        "index": lambda a, b: a[torch.arange(2)],
        "numbers": lambda a, b: (a * 0.1 + 0.3) / 7 - 2,
        "int_number": lambda a, b: (a * 3).div_(7).mul_(0.9),
        "bf16_number": lambda a, b: (a.to(torch.bfloat16) * 0.1).float()}
    bitwise = ("scalar", "numbers", "int_number", "bf16_number")  # what eager torch gives, exactly
    for dp, tp in [(0, 0), (1, 1)]:
        local_a = fetch_shard(a, dp=dp, tp=tp).get(timeout=30)
        local_b = fetch_shard(b, dp=dp, tp=tp).get(timeout=30)
        for name, t in outs.items():
            got = fetch_shard(t, dp=dp, tp=tp).get(timeout=30)
            expected = want[name](local_a, local_b)
            assert got.dtype == expected.dtype and got.shape == expected.shape, name
            torch.testing.assert_close(got, expected, msg=name)
            if name in bitwise:
                assert torch.equal(got, expected), name
        np.testing.assert_array_equal(fetch_shard(counter, dp=dp, tp=tp).get(timeout=30), [7] * 3)
    after = native_counts()  # rank 0 (dp=0, tp=0) has run them all: fetched above
    if not _native.ENABLED:  # CROWN_TENSOR_NATIVE=0 (python.tensor_engine_python)
        assert after == before, (before, after)  # none went to the native kernel
        return
    assert after["native"] - before["native"] >= 20, (before, after)  # ~25 ops ran in C++
    assert after["python"] - before["python"] >= 1, (before, after)   # index did not


def test_a_native_op_that_fails_is_a_deferred_error_naming_the_op_and_size():
    procs = grid()
    with procs.activate():
        fine = torch.ones(3)
        huge = torch.empty(2 ** 44, dtype=torch.uint8)  # 16 TiB on every rank
        later = huge + 1
    with pytest.raises(RemoteException) as failed:
        fetch_shard(later, dp=0, tp=1).get(timeout=30)
    e = failed.value
    assert e.rank == 1 and e.op == "aten::empty.memory_format", e
    assert "RuntimeError" in e.message and str(2 ** 44) in e.message, e.message
    assert "test_tensor_engine.py" in e.location
    np.testing.assert_array_equal(inspect(fine).numpy(), [1.0] * 3)  # the engine serves on


def test_reductions_in_a_row_run_as_one_and_give_each_its_own_result():
    # Gradients reduced one after another (small allreduces in a row) run as
    # one allreduce on the engines; each result is its own, in place or not.
    procs = grid()
    with procs.activate():
        a = torch.rand(8, 4)
        b = torch.rand(3)
        c = torch.rand(2, 5)
        ra = a.reduce("dp", reduction="avg")
        b.reduce_("dp", reduction="avg")
        rc = c.reduce("dp", reduction="avg")
    before = {name: shards(t, procs) for name, t in (("a", a), ("c", c))}
    for key in before["a"]:
        for name, result in (("a", ra), ("c", rc)):
            members = np.stack([before[name][m] for m in GROUPS["dp"](*key)])
            np.testing.assert_allclose(fetch_shard(result, dp=key[0], tp=key[1]).get(timeout=30),
                                       members.mean(0), rtol=1e-6)
    bs = shards(b, procs)
    for key, got in bs.items():  # every member of a dp group holds the same average
        partner = [m for m in GROUPS["dp"](*key) if m != key][0]
        np.testing.assert_array_equal(got, bs[partner])


def test_reductions_in_a_row_keep_their_order_where_they_share_memory_or_one_fails():
    procs = grid()
    with procs.activate():
        x = torch.ones(4)
        middle = x[1:3]                                 # a view: shares x's memory
        x.reduce_("dp", reduction="sum")                # 2 everywhere
        middle.reduce_("dp", reduction="sum")           # then 4 in the middle, as if alone
        rank = procs.tensors().rank(("dp", "tp"))
        bad = remote(fails_on_rank_two, propagate=lambda x, rank: x)(torch.ones(3), rank)
        good = torch.ones(3)
        good.reduce_("dp")
        bad.reduce_("dp")                               # fails in the group of rank 2 only
        after = torch.ones(2)
        after.reduce_("dp")
    for dp in range(2):
        for tp in range(2):
            np.testing.assert_array_equal(fetch_shard(x, dp=dp, tp=tp).get(timeout=30),
                                          [2.0, 4.0, 4.0, 2.0])
            np.testing.assert_array_equal(fetch_shard(good, dp=dp, tp=tp).get(timeout=30), [2.0] * 3)
            np.testing.assert_array_equal(fetch_shard(after, dp=dp, tp=tp).get(timeout=30), [2.0] * 2)
    with pytest.raises(RemoteException, match="rank two has no data"):
        fetch_shard(bad, dp=0, tp=0).get(timeout=30)  # ranks 0 and 2 reduce together
    np.testing.assert_array_equal(fetch_shard(bad, dp=0, tp=1).get(timeout=30), [4.0] * 3)
