"""Monarch's Shape and Slice for crown's meshes.

crown's C++ Shape (python/src/bind_mesh.cpp) gets Monarch's methods here
(at, select(label, slice), index, ndslice), so every Shape has them, also
those the runtime returns; Slice is Monarch's ndslice, the ranks a Shape
covers as offset, sizes and strides. Importing crown.actor installs them.
"""

from __future__ import annotations

import math
from typing import Iterator, List

from . import _crown


class Slice:
    """Which ranks a Shape covers, as Monarch's ``Shape.ndslice``: rank =
    ``offset + sum(coordinate * stride)``; ``index(rank)`` is a rank's place
    in row-major order, ``get(index)`` its inverse."""

    def __init__(self, *, offset: int, sizes: List[int], strides: List[int]):
        if len(sizes) != len(strides):
            raise ValueError(f"a slice needs one stride per size: sizes {sizes}, strides {strides}")
        self.offset, self.sizes, self.strides = offset, list(sizes), list(strides)

    @staticmethod
    def new_row_major(ranks) -> "Slice":
        """One dimension over consecutive ranks (Monarch's Slice.new_row_major)."""
        ranks = list(ranks)
        if not ranks or ranks != list(range(ranks[0], ranks[0] + len(ranks))):
            raise ValueError(f"new_row_major needs consecutive ranks, not {ranks}")
        return Slice(offset=ranks[0], sizes=[len(ranks)], strides=[1])

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    def __len__(self):
        return math.prod(self.sizes)

    def nditem(self, coordinates: List[int]) -> int:
        """The rank at coordinates; IndexError when they are out of bounds."""
        if len(coordinates) != self.ndim:
            raise IndexError(f"{len(coordinates)} coordinates for a slice of {self.ndim} "
                             f"dimensions")
        rank = self.offset
        for coordinate, size, stride in zip(coordinates, self.sizes, self.strides):
            if not 0 <= coordinate < size:
                raise IndexError(f"coordinate {coordinate} is out of range for size {size}")
            rank += coordinate * stride
        return rank

    def get(self, index: int) -> int:
        """The rank at row-major place index."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} is out of range for a slice of {len(self)} ranks")
        coordinates = []
        for size in reversed(self.sizes):
            index, coordinate = divmod(index, size)
            coordinates.append(coordinate)
        return self.nditem(coordinates[::-1])

    def coordinates(self, value: int) -> List[int]:
        """The coordinates of rank value; ValueError when it is not in the slice."""
        rest = value - self.offset
        coordinates = [0] * self.ndim
        # Largest stride first: with the strides of a row-major (sub)mesh each
        # coordinate is the quotient of what is left.
        for dim in sorted(range(self.ndim), key=lambda d: -self.strides[d]):
            if self.strides[dim] > 0 and rest >= 0:
                coordinates[dim], rest = divmod(rest, self.strides[dim])
        try:
            if rest == 0 and self.nditem(coordinates) == value:
                return coordinates
        except IndexError:
            pass
        raise ValueError(f"rank {value} is not in {self!r}")

    def index(self, value: int) -> int:
        """Rank value's place in row-major order; ValueError when it is not in the slice."""
        index = 0
        for coordinate, size in zip(self.coordinates(value), self.sizes):
            index = index * size + coordinate
        return index

    def __iter__(self) -> Iterator[int]:
        return (self.get(i) for i in range(len(self)))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self.get(j) for j in range(*i.indices(len(self))))
        return self.get(i + len(self) if i < 0 else i)

    def __eq__(self, other):
        return isinstance(other, Slice) and (self.offset, self.sizes, self.strides) == (
            other.offset, other.sizes, other.strides)

    def __hash__(self):
        return hash((self.offset, tuple(self.sizes), tuple(self.strides)))

    def __repr__(self):
        return f"Slice(offset={self.offset}, sizes={self.sizes}, strides={self.strides})"


# Monarch's Shape methods that crown's C++ Shape (python/src/bind_mesh.cpp)
# lacks, added to it here so that every Shape has them, also those the
# runtime returns. select keeps crown's form, select({label: index or
# slice, ...}), beside Monarch's select(label, slice).
_select_dims = _crown.Shape.select


def _shape_select(self, label, selector=None):
    """``select(label, slice)`` keeps the dimension, restricted (Monarch's
    form); ``select({label: index or slice, ...})`` selects several at once
    (an index removes its dimension)."""
    if isinstance(label, str):
        if selector is None:
            raise TypeError(f"select({label!r}) needs a slice (or an index) of that dimension")
        return _select_dims(self, {label: selector})
    if selector is not None:
        raise TypeError("select(dict) takes no second argument")
    return _select_dims(self, label)


def _shape_at(self, label: str, index: int):
    """The shape without dimension label, at its index (Monarch's Shape.at)."""
    return _select_dims(self, {label: index})


def _shape_index(self, **indices):
    """``index(hosts=0, gpus=3)``: removes each named dimension, at its index."""
    return _select_dims(self, indices)


def _shape_ndslice(self) -> Slice:
    _, offset, sizes, strides, chosen = self.__getstate__()
    if chosen:
        raise ValueError(f"{self} stands over chosen ranks {chosen} (a mesh of survivors), "
                         f"which no offset and strides describe: use ranks()")
    return Slice(offset=offset, sizes=sizes, strides=strides)


_crown.Shape.select = _shape_select
_crown.Shape.at = _shape_at
_crown.Shape.index = _shape_index
_crown.Shape.ndslice = property(_shape_ndslice, doc="The ranks it covers, as a Slice.")
