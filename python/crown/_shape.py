"""Monarch's Shape and Slice for crown's meshes.

crown's C++ Shape (python/src/bind_mesh.cpp) gets Monarch's methods here
(at, select(label, slice), index, ndslice), so every Shape has them, also
those the runtime returns; Slice is Monarch's ndslice, the ranks a Shape
covers as offset, sizes and strides. Importing crown.actor installs them.

Errors are Monarch's, type and leading words (ndslice's SliceError and
ShapeError): a bad label is ValueError "invalid labels", an index or range
past a dimension ValueError "out of range", an empty range ValueError
"empty range", a negative index OverflowError, a slice that no offset and
strides describe ValueError ("invalid dims", "nonrectangular shape",
"nonunique strides", "stride ... must be larger than size of previous
space"); a rank not in a Slice is ValueError "value ... not in slice".
"""

from __future__ import annotations

import math
import operator
from typing import Iterator, List, Optional, Sequence

from . import _crown


def _unsigned(value, what: str) -> int:
    """value as a non-negative int, failing as Monarch's usize arguments do:
    TypeError for a non-integer, OverflowError for a negative one."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: '{type(value).__name__}' object cannot be interpreted as an "
                        f"integer") from None
    if value < 0:
        raise OverflowError(f"can't convert negative int to unsigned ({what} {value})")
    return value


def _check_layout(sizes: List[int], strides: List[int]) -> None:
    """ndslice's Slice::new rules: one stride per size; taken by increasing
    stride, each divides the next (rectangular), none repeats unless a
    dimension of size 1 is involved, and each is at least the span of the
    smaller ones. Raises ValueError with ndslice's words."""
    if len(sizes) != len(strides):
        raise ValueError(f"invalid dims: expected {len(sizes)}, got {len(strides)}")
    previous = None  # (stride, size) of the dimension with the next smaller stride
    span = 1
    for stride, size in sorted(zip(strides, sizes)):
        if previous is not None:
            if previous[0] == 0 or stride % previous[0] != 0:
                raise ValueError("nonrectangular shape")
            if stride == previous[0] and size != 1 and previous[1] != 1:
                raise ValueError("nonunique strides")
        if span > stride:
            raise ValueError(f"stride {stride} must be larger than size of previous space {span}")
        span = stride * size
        previous = (stride, size)


class Slice:
    """Which ranks a Shape covers, as Monarch's ``Shape.ndslice``: rank =
    ``offset + sum(coordinate * stride)``; ``index(rank)`` is a rank's place
    in row-major order, ``get(index)`` its inverse. Built with keywords only,
    ``Slice(offset=0, sizes=[2, 4], strides=[4, 1])``, and checked as
    Monarch checks it (ValueError for a layout no mesh has)."""

    def __init__(self, *, offset: int, sizes: Sequence[int], strides: Sequence[int]):
        offset = _unsigned(offset, "offset")
        sizes = [_unsigned(size, "size") for size in sizes]
        strides = [_unsigned(stride, "stride") for stride in strides]
        _check_layout(sizes, strides)
        self.offset, self.sizes, self.strides = offset, sizes, strides

    @classmethod
    def _of(cls, offset: int, sizes: List[int], strides: List[int]) -> "Slice":
        """A slice the runtime vouches for (a Shape's own), unchecked: crown's
        meshes may step any dimension (nested, not only rectangular)."""
        made = object.__new__(cls)
        made.offset, made.sizes, made.strides = offset, list(sizes), list(strides)
        return made

    @staticmethod
    def new_row_major(sizes: Sequence[int]) -> "Slice":
        """The dense row-major slice of these sizes from rank 0 (Monarch's
        Slice.new_row_major): ``new_row_major([2, 3])`` has strides [3, 1]."""
        sizes = [_unsigned(size, "size") for size in sizes]
        strides, stride = [], 1
        for size in reversed(sizes):
            strides.append(stride)
            stride *= size
        return Slice._of(0, sizes, strides[::-1])

    @staticmethod
    def from_list(ranks: Sequence[int]) -> List["Slice"]:
        """One-dimensional slices that cover these ranks, in increasing order,
        each as long an evenly spaced run as it can be (Monarch's
        Slice.from_list): ``[0, 2, 4, 5]`` gives offset 0 stride 2 size 3,
        then offset 5 size 1. No ranks: no slices."""
        slices: List[Slice] = []
        run: List[int] = []  # the current evenly spaced run
        for rank in sorted(_unsigned(rank, "rank") for rank in ranks):
            if len(run) >= 2:
                extends = rank - run[-1] == run[1] - run[0]
            else:
                extends = not run or rank > run[0]
            if not extends:
                slices.append(Slice._run(run))
                run = []
            run.append(rank)
        if run:
            slices.append(Slice._run(run))
        return slices

    @staticmethod
    def _run(run: List[int]) -> "Slice":
        return Slice._of(run[0], [len(run)], [run[1] - run[0] if len(run) > 1 else 1])

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    def __len__(self):
        return math.prod(self.sizes)

    def nditem(self, coordinates: Sequence[int]) -> int:
        """The rank at coordinates; IndexError when there are not one per
        dimension, or one is out of its dimension's range."""
        if len(coordinates) != self.ndim:
            raise IndexError(f"invalid dims: expected {self.ndim}, got {len(coordinates)}")
        rank = self.offset
        for coordinate, size, stride in zip(coordinates, self.sizes, self.strides):
            if not 0 <= coordinate < size:
                raise IndexError(f"index {coordinate} out of range {size}")
            rank += coordinate * stride
        return rank

    def get(self, index: int) -> int:
        """The rank at row-major place index; ValueError past the end (Monarch's)."""
        index = _unsigned(index, "index")
        if index >= len(self):
            raise ValueError(f"index {index} out of range {len(self)}")
        return self._at(index)

    def _at(self, index: int) -> int:
        rank = self.offset
        for size, stride in zip(reversed(self.sizes), reversed(self.strides)):
            index, coordinate = divmod(index, size)
            rank += coordinate * stride
        return rank

    def coordinates(self, value: int) -> List[int]:
        """The coordinates of rank value; ValueError when it is not in the slice."""
        rest = value - self.offset
        coordinates = [0] * self.ndim
        # Largest stride first, over the dimensions that have more than one
        # element: in a nested slice each coordinate is the quotient of what is left.
        for dim in sorted(range(self.ndim), key=lambda d: -self.strides[d]):
            if self.sizes[dim] > 1 and rest >= 0:
                coordinates[dim], rest = divmod(rest, self.strides[dim])
        if rest == 0 and all(c < size for c, size in zip(coordinates, self.sizes)):
            return coordinates
        raise ValueError(f"value {value} not in slice {self!r}")

    def index(self, value: int) -> int:
        """Rank value's place in row-major order; ValueError when it is not in the slice."""
        index = 0
        for coordinate, size in zip(self.coordinates(value), self.sizes):
            index = index * size + coordinate
        return index

    def __contains__(self, value) -> bool:
        try:
            self.coordinates(value)
            return True
        except (TypeError, ValueError):
            return False

    def __iter__(self) -> Iterator[int]:
        return (self._at(i) for i in range(len(self)))

    def __getitem__(self, i):
        """``s[k]`` is the rank at place k (a negative k counts from the end,
        as Python's sequences do); ``s[a:b:c]`` a tuple of ranks. IndexError
        past either end."""
        if isinstance(i, slice):
            return tuple(self._at(j) for j in range(*i.indices(len(self))))
        i = operator.index(i)
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError(f"index {i} out of range {len(self)}")
        return self._at(k)

    def __eq__(self, other):
        return isinstance(other, Slice) and (self.offset, self.sizes, self.strides) == (
            other.offset, other.sizes, other.strides)

    def __hash__(self):
        return hash((self.offset, tuple(self.sizes), tuple(self.strides)))

    def __reduce__(self):
        return (_slice_of, (self.offset, self.sizes, self.strides))

    def __repr__(self):
        return f"Slice(offset={self.offset}, sizes={self.sizes}, strides={self.strides})"


def _slice_of(offset, sizes, strides) -> Slice:
    return Slice._of(offset, sizes, strides)


# Monarch's Shape methods that crown's C++ Shape (python/src/bind_mesh.cpp)
# lacks, added to it here so that every Shape has them, also those the
# runtime returns. select keeps crown's form, select({label: index or
# slice, ...}), beside Monarch's select(label, slice).
_select_dims = _crown.Shape.select


def _dimension(shape, label) -> int:
    """The size of dimension label; ValueError "invalid labels" (ndslice's
    ShapeError) when the shape has none of that name."""
    if not isinstance(label, str):
        raise TypeError(f"a dimension's label is a str, not {type(label).__name__}")
    if label not in shape.labels:
        raise ValueError(f'invalid labels `["{label}"]`: no dimension {label!r} in shape '
                         f"{shape}")
    return shape.size(label)


def _range_of(shape, label: str, selector) -> slice:
    """Monarch's select(label, slice) checks, in its order: the label, the
    step, the begin within the dimension, a non-empty range. An int i is the
    range i:i+1 (ndslice's select of one index: the dimension stays, size 1)."""
    size = _dimension(shape, label)
    if isinstance(selector, slice):
        start, stop, step = selector.indices(size)  # "slice step cannot be zero"
        if step < 0:
            raise ValueError(f"invalid step {step} for dimension {label}: a mesh's ranks "
                             f"keep their order, so a range's step must be positive")
    else:
        try:
            start = _unsigned(selector, f"select({label!r}, ...)")
        except TypeError:
            raise TypeError(f"select({label!r}, ...) takes a slice of that dimension (or an "
                            f"index), not {type(selector).__name__}") from None
        stop, step = start + 1, 1
    if start >= size:
        raise ValueError(f"out of range {start}:{stop}:{step} for dimension {label} of size "
                         f"{size}")
    if stop <= start:
        raise ValueError(f"empty range {start}:{stop}:{step} for dimension {label}")
    return slice(start, stop, step)


def _shape_select(self, label, selector=None):
    """``select(label, slice)`` keeps the dimension, restricted to the slice
    (Monarch's form; an index i is the slice i:i+1, so the dimension stays,
    of size 1); ``select({label: index or slice, ...})`` is crown's form,
    several at once, where an index removes its dimension."""
    if isinstance(label, str):
        if selector is None:
            raise TypeError(f"select({label!r}) needs a slice (or an index) of that dimension")
        return _select_dims(self, {label: _range_of(self, label, selector)})
    if selector is not None:
        raise TypeError("select(dict) takes no second argument")
    return _select_dims(self, label)


def _shape_at(self, label: str, index: int):
    """The shape without dimension label, at its index (Monarch's Shape.at)."""
    index = _unsigned(index, f"at({label!r}, ...)")  # before the label, as Monarch's
    size = _dimension(self, label)
    if index >= size:
        raise ValueError(f"out of range {index}:{index + 1}:1 for dimension {label} of size "
                         f"{size}")
    return _select_dims(self, {label: index})


def _shape_index(self, **indices):
    """``index(hosts=0, gpus=3)``: removes each named dimension, at its index."""
    indices = {label: _unsigned(index, f"index({label}=...)") for label, index in indices.items()}
    shape = self
    for label, index in indices.items():
        shape = _shape_at(shape, label, index)
    return shape


def _fitted(sizes: List[int], ranks: List[int]) -> Optional[Slice]:
    """The slice of these sizes whose row-major ranks are these, if an offset
    and strides describe them; None otherwise."""
    offset, strides, unit = ranks[0], [], 1
    places = [0] * len(sizes)  # row-major place of the unit step in each dimension
    for dim in reversed(range(len(sizes))):
        places[dim] = unit
        unit *= sizes[dim]
    for dim, size in enumerate(sizes):
        stride = ranks[places[dim]] - offset if size > 1 else 1
        if stride <= 0:
            return None
        strides.append(stride)
    try:
        _check_layout(sizes, strides)
    except ValueError:
        return None
    fitted = Slice._of(offset, sizes, strides)
    return fitted if list(fitted) == ranks else None


def _shape_ndslice(self) -> Slice:
    _, offset, sizes, strides, chosen = self.__getstate__()
    if not chosen:
        return Slice._of(offset, sizes, strides)
    # Over chosen ranks (survivors, replacements): a strided slice when they
    # happen to be evenly spaced, as non-consecutive ranks in Monarch are.
    fitted = _fitted(list(sizes), self.ranks())
    if fitted is None:
        raise ValueError(f"{self} stands over chosen ranks {self.ranks()} (a mesh of "
                         f"survivors), which no offset and strides describe: use ranks()")
    return fitted


_coordinates = _crown.Shape.coordinates


def _shape_coordinates(self, rank: int):
    """{label: index} of rank, in the shape's dimension order (Monarch's);
    ValueError "value ... not in slice" when the shape does not cover it."""
    try:
        found = _coordinates(self, rank)
    except ValueError as e:
        raise ValueError(f"value {rank} not in slice: {e}") from None
    return {label: found[label] for label in self.labels}


_crown.Shape.coordinates = _shape_coordinates
_crown.Shape.select = _shape_select
_crown.Shape.at = _shape_at
_crown.Shape.index = _shape_index
_crown.Shape.ndslice = property(_shape_ndslice, doc="The ranks it covers, as a Slice.")
