"""Shapes and slices as Monarch's Shape, Slice (ndslice) and MeshTrait.slice:
at() removes a dimension, select() keeps it (size 1 for one index), a
multi-dimensional slice keeps its labels, non-consecutive ranks are a
strided slice, and bad slices fail with Monarch's error types and leading
words. Pure Python, one process: no runtime (CROWN_RUNTIME = False); meshes
and ValueMeshes are built from shapes directly."""

import pickle

import pytest

from crown.actor import ProcMesh, Shape, Slice, ValueMesh

CROWN_RUNTIME = False  # conftest: no MPI bootstrap for this module


def grid(*dims):
    """A row-major shape from rank 0 with these (label, size) dimensions."""
    return Shape([label for label, _ in dims], Slice.new_row_major([size for _, size in dims]))


def layout(shape):
    nd = shape.ndslice
    return shape.labels, nd.offset, nd.sizes, nd.strides


# Shape.at / select / index: Monarch's arithmetic on offset, sizes, strides.

def test_at_removes_the_dimension_and_moves_the_offset():
    shape = grid(("batch", 2), ("height", 3), ("width", 4))
    assert layout(shape.at("batch", 1)) == (["height", "width"], 12, [3, 4], [4, 1])
    assert layout(shape.at("height", 2)) == (["batch", "width"], 8, [2, 4], [12, 1])
    assert layout(shape.at("width", 3)) == (["batch", "height"], 3, [2, 3], [12, 4])
    assert shape.index(batch=1, width=2).ranks() == [14, 18, 22]


def test_select_keeps_the_dimension():
    shape = grid(("rows", 4), ("cols", 6))
    assert layout(shape.select("rows", slice(1, 3))) == (["rows", "cols"], 6, [2, 6], [6, 1])
    assert layout(shape.select("cols", slice(0, 6, 2))) == (["rows", "cols"], 0, [4, 3], [6, 2])
    # One index keeps the dimension, of size 1 (ndslice's select of an index).
    assert layout(shape.select("rows", 2)) == (["rows", "cols"], 12, [1, 6], [6, 1])
    assert layout(shape.select("rows", slice(2, 3))) == layout(shape.select("rows", 2))
    # Python's slice rules: negative bounds count from the end, stop is clamped.
    assert shape.select("rows", slice(-1, None)).ranks() == list(range(18, 24))
    assert shape.select("cols", slice(4, 100)).ranks() == [4, 5, 10, 11, 16, 17, 22, 23]
    mixed = shape.select("cols", slice(1, 4)).at("rows", 0)
    assert mixed.labels == ["cols"] and mixed.ranks() == [1, 2, 3]


BAD_SELECTIONS = [
    # (what, error type, Monarch's leading words)
    (lambda s: s.at("nonexistent", 0), ValueError, "invalid labels"),
    (lambda s: s.at("rows", 5), ValueError, "out of range 5:6:1 for dimension rows"),
    (lambda s: s.at("rows", -1), OverflowError, "can't convert negative int to unsigned"),
    (lambda s: s.at("rows", 1.0), TypeError, None),
    (lambda s: s.index(rows=-1), OverflowError, "can't convert negative int"),
    (lambda s: s.index(nodes=0), ValueError, "invalid labels"),
    (lambda s: s.select("nodes", slice(0, 1)), ValueError, "invalid labels"),
    (lambda s: s.select("rows", slice(5, 6)), ValueError, "out of range 4:4:1"),
    (lambda s: s.select("rows", slice(2, 2)), ValueError, "empty range 2:2:1"),
    (lambda s: s.select("rows", slice(3, 1)), ValueError, "empty range"),
    (lambda s: s.select("rows", slice(0, 4, 0)), ValueError, "slice step cannot be zero"),
    (lambda s: s.select("rows", slice(None, None, -1)), ValueError, "invalid step -1"),
    (lambda s: s.select("rows", "0"), TypeError, None),
    (lambda s: s.select("rows"), TypeError, None),
]


@pytest.mark.parametrize("case", range(len(BAD_SELECTIONS)))
def test_bad_selections_fail_as_monarchs_do(case):
    select, error, words = BAD_SELECTIONS[case]
    with pytest.raises(error) as raised:
        select(grid(("rows", 4), ("cols", 6)))
    assert words is None or str(raised.value).startswith(words), str(raised.value)


def test_coordinates_follow_the_dimension_order():
    shape = grid(("zone", 2), ("gpus", 3))
    assert list(shape.coordinates(4).items()) == [("zone", 1), ("gpus", 1)]
    with pytest.raises(ValueError, match="^value 6 not in slice"):
        shape.coordinates(6)


# Slice: Monarch's constructor checks, new_row_major(sizes), from_list, lookups.

def test_slice_is_checked_as_ndslice_checks_it():
    for sizes, strides, words in (([2], [1, 1], "invalid dims: expected 1, got 2"),
                                  ([2, 2], [3, 2], "nonrectangular shape"),
                                  ([2, 2], [1, 1], "nonunique strides"),
                                  ([4, 2], [1, 2], "stride 2 must be larger than size of "
                                                   "previous space 4")):
        with pytest.raises(ValueError) as raised:
            Slice(offset=0, sizes=sizes, strides=strides)
        assert str(raised.value) == words
    with pytest.raises(OverflowError):
        Slice(offset=-1, sizes=[2], strides=[1])
    with pytest.raises(TypeError):
        Slice(0, [2], [1])  # keywords only
    # A dimension of size 1 may repeat a stride; a transposed layout is fine.
    assert list(Slice(offset=3, sizes=[1, 2], strides=[1, 1])) == [3, 4]
    assert list(Slice(offset=0, sizes=[2, 2], strides=[1, 2])) == [0, 2, 1, 3]


def test_slice_lookups():
    nd = Slice.new_row_major([2, 3])
    assert (nd.offset, nd.sizes, nd.strides, nd.ndim, len(nd)) == (0, [2, 3], [3, 1], 2, 6)
    strided = Slice(offset=1, sizes=[2, 2], strides=[6, 2])
    assert list(strided) == [1, 3, 7, 9] and strided[1:3] == (3, 7) and strided[-1] == 9
    assert strided.get(2) == 7 and strided.index(7) == 2 and strided.coordinates(9) == [1, 1]
    assert strided.nditem([1, 0]) == 7
    with pytest.raises(ValueError, match="^index 4 out of range 4"):
        strided.get(4)  # Monarch's get raises ValueError, [] IndexError
    with pytest.raises(IndexError, match="^index 4 out of range 4"):
        strided[4]
    for absent in (0, 2, 5, 11):
        with pytest.raises(ValueError, match=f"^value {absent} not in slice"):
            strided.index(absent)
    with pytest.raises(IndexError, match="^invalid dims: expected 2, got 1"):
        strided.nditem([0])
    with pytest.raises(IndexError):
        strided.nditem([2, 0])
    assert pickle.loads(pickle.dumps(strided)) == strided
    assert hash(strided) == hash(Slice(offset=1, sizes=[2, 2], strides=[6, 2]))
    assert 7 in strided and 8 not in strided


def test_from_list_covers_ranks_with_strided_runs():
    runs = Slice.from_list([9, 0, 4, 2, 5])
    assert [(s.offset, s.sizes, s.strides) for s in runs] == [
        (0, [3], [2]), (5, [2], [4])]
    assert Slice.from_list([]) == [] and Slice.from_list([7]) == [Slice(offset=7, sizes=[1],
                                                                        strides=[1])]


# Non-consecutive ranks: a strided slice, a mesh and its ValueMesh like any other.

def test_non_consecutive_ranks_are_a_strided_slice():
    odd = Shape(["ranks"], Slice(offset=1, sizes=[3], strides=[3]))
    assert odd.ranks() == [1, 4, 7] and odd.coordinates(4) == {"ranks": 1}
    # A shape over chosen ranks (survivors) that happen to be evenly spaced.
    assert Shape.of_ranks("ranks", [2, 5, 8]).ndslice == Slice(offset=2, sizes=[3], strides=[3])
    with pytest.raises(ValueError, match="no offset and strides describe"):
        Shape.of_ranks("ranks", [0, 1, 3]).ndslice
    mesh = ProcMesh(odd)
    assert mesh.slice(ranks=slice(1, 3)).shape.ranks() == [4, 7]


def test_mesh_slices_keep_the_labels_of_every_dimension():
    shape = grid(("hosts", 2), ("gpus", 4))
    values = ValueMesh(shape, [(rank, rank * 10, None) for rank in range(8)])
    kept = values.slice(gpus=slice(1, 4, 2))
    assert kept.sizes == {"hosts": 2, "gpus": 2} and kept.shape.labels == ["hosts", "gpus"]
    assert kept.values() == [10, 30, 50, 70] and kept.item(hosts=1, gpus=0) == 50
    one = values.slice(hosts=slice(1, 2))  # a slice keeps even a dimension of size 1
    assert one.sizes == {"hosts": 1, "gpus": 4} and one.values() == [40, 50, 60, 70]
    assert values.slice(hosts=1, gpus=slice(2, None)).sizes == {"gpus": 2}
    procs = ProcMesh(shape).slice(gpus=slice(0, 2), hosts=1)
    assert procs.shape.labels == ["gpus"] and procs.shape.ranks() == [4, 5]
    assert ProcMesh(shape).size(("hosts", "gpus")) == 8 and procs.size("gpus") == 2


def test_bad_mesh_slices_fail_as_monarchs_do():
    mesh = ProcMesh(grid(("hosts", 2), ("gpus", 4)))
    with pytest.raises(TypeError, match="^Shape does not have dimension labeled 'nodes'"):
        mesh.slice(nodes=0)
    for index in (4, -1):
        with pytest.raises(IndexError, match="^index out of range"):
            mesh.slice(gpus=index)
    with pytest.raises(ValueError, match="^empty range"):
        mesh.slice(gpus=slice(3, 3))  # no mesh of no members, as in Monarch
    with pytest.raises(KeyError):
        mesh.size("nodes")
