"""What calls give back (crown.actor re-exports each): Future, a result to
come; ValueMesh, one value per member of a mesh; Point, a member's
coordinates; and what a mesh and its ValueMeshes share, slicing."""

from __future__ import annotations

import asyncio
import inspect
import operator
import threading
from typing import (Any, Callable, Coroutine, Dict, Generic, Iterator, List, Optional, Tuple,
                    TypeVar)

from . import _crown, _shape  # noqa: F401 - _shape gives every Shape Monarch's methods


R = TypeVar("R")

SupervisionError = _crown.SupervisionError
Shape = _crown.Shape


class Future(Generic[R]):
    """A result to come: ``get(timeout=None)``, or ``await future``. A get
    that times out (TimeoutError) leaves it pending: get again later.

    crown's calls make them; a program makes one of a coroutine as Monarch's
    do, ``Future(coro=main())`` or ``Future._from_coro(main())``: the
    coroutine runs once, at the first get() (on a loop of its own) or await
    (on the awaiting loop), and every get and await has its outcome."""

    _mesh: Optional["Future"] = None  # call()'s: the ValueMesh with errors in place
    _run: Optional["_CoroutineRun"] = None  # Future(coro=...)'s

    def __init__(self, wait: Optional[Callable[[Optional[float]], Any]] = None, *,
                 coro: Optional[Coroutine[Any, Any, R]] = None):
        if coro is not None:
            if wait is not None:
                raise TypeError("Future takes a coroutine (coro=) or crown's wait function, "
                                "not both")
            self._run = _CoroutineRun(coro)
            wait = self._run.wait
        elif wait is None:
            raise TypeError("Future objects are returned by Monarch operations and cannot be "
                            "constructed directly; Future(coro=...) runs a coroutine")
        self._wait = wait
        self._lock = threading.Lock()
        self._done = False
        self._value = None
        self._error = None

    def get(self, timeout: Optional[float] = None) -> R:
        with self._lock:
            if not self._done:
                try:
                    self._value = self._wait(timeout)
                except TimeoutError:
                    raise
                except BaseException as e:  # noqa: BLE001 - kept, raised on every get
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value

    result = get

    def value_mesh(self, timeout: Optional[float] = None) -> "ValueMesh":
        """call()'s replies with each failed member's error in its place
        (ValueMesh.errors()), where get() raises the first failure."""
        if self._mesh is None:
            raise TypeError("value_mesh() is for the Future of an endpoint's call(); this "
                            "Future holds a single result")
        return self._mesh.get(timeout)

    @classmethod
    def _from_coro(cls, coro: Coroutine[Any, Any, R]) -> "Future[R]":
        """Monarch's constructor: the Future of a coroutine, ``Future(coro=coro)``."""
        return cls(coro=coro)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """What get() raises, or None when it returns (Monarch's); waits as get() does."""
        try:
            self.get(timeout)
            return None
        except TimeoutError:
            raise
        except BaseException as e:  # noqa: BLE001 - the outcome itself
            return e

    def __await__(self):
        if self._run is not None and self._run.claim():  # runs here, on the awaiting loop
            return self._run.drive().__await__()
        return self.as_asyncio().__await__()

    def as_asyncio(self) -> "asyncio.Future[R]":
        """An asyncio.Future of the running loop that resolves as this does."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.get)


class _CoroutineRun:
    """Future(coro=...)'s coroutine, run exactly once: by the first await, on
    the awaiting loop, or by the first get(), on this thread's own loop when
    it has none running and no timeout is asked, else on a thread of its own.
    A get that times out leaves it running."""

    def __init__(self, coro):
        if not inspect.isawaitable(coro):
            raise TypeError(f"Future(coro=...) takes a coroutine, not {type(coro).__name__}")
        self._coro = coro
        self._claimed = False
        self._claim_lock = threading.Lock()
        self._finished = threading.Event()
        self._value = None
        self._error: Optional[BaseException] = None

    def claim(self) -> bool:
        """True for the one caller that is to run the coroutine."""
        with self._claim_lock:
            claimed, self._claimed = self._claimed, True
            return not claimed

    async def _run(self) -> None:
        try:
            self._value = await self._coro
        except BaseException as e:  # noqa: BLE001 - every waiter sees it
            self._error = e
        finally:
            self._coro = None
            self._finished.set()

    async def drive(self):
        """Runs the coroutine on the awaiting loop; its outcome."""
        await self._run()
        return self.wait(0)

    def wait(self, timeout: Optional[float]):
        if self.claim():
            if timeout is None and asyncio._get_running_loop() is None:
                asyncio.run(self._run())
            else:
                threading.Thread(target=asyncio.run, args=(self._run(),), daemon=True,
                                 name="crown-future-coro").start()
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the Future's coroutine did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value


def _first_failure(mesh: "ValueMesh", failed: List[Tuple[int, BaseException]]) -> BaseException:
    """What call().get() raises: the first failed member's error (row-major),
    the first lost one's when a process is gone (SupervisionError), as a copy
    whose message says how many others failed, with ``value_mesh`` attached."""
    lost = [f for f in failed if isinstance(f[1], SupervisionError)]
    rank, error = (lost or failed)[0]
    others = [r for r, _ in failed if r != rank]
    if not others:
        note = "(the only member of the mesh that failed)"
    else:
        shown = ", ".join(map(str, others[:8])) + (", ..." if len(others) > 8 else "")
        note = (f"({len(others)} other member{'s' if len(others) > 1 else ''} of the mesh "
                f"failed too: rank{'s' if len(others) > 1 else ''} {shown}; the error's "
                f"value_mesh holds every member's outcome)")
    head, newline, rest = str(error).partition("\n")
    try:
        raised = type(error)(f"{head} {note}{newline}{rest}")
        raised.__dict__.update(error.__dict__)  # rank, actor, traceback, exception, host
        raised.__cause__ = error.__cause__
    except Exception:  # an error type that takes other arguments: raised as it is
        raised = error
    raised.value_mesh = mesh
    return raised


def _all_succeeded(mesh: "ValueMesh") -> "ValueMesh":
    failed = mesh.errors()
    if failed:
        raise _first_failure(mesh, failed)
    return mesh


class Point(dict):
    """A rank's coordinates in its mesh (a dict label -> index) and its rank.
    ``str()`` reads as Monarch's: ``{'hosts': 0/1, 'gpus': 1/2}`` (index/size)."""

    def __init__(self, rank: int, shape: Shape):
        coordinates = shape.coordinates(rank)  # keyed by label, in no particular order
        super().__init__({label: coordinates[label] for label in shape.labels})  # the mesh's
        self.rank = rank
        self.shape = shape

    def size(self, label: str) -> int:
        """The size of dimension label."""
        return self.shape.size(label)

    def __str__(self):
        sizes = dict(self.shape.sizes)
        return "{" + ", ".join(f"'{label}': {index}/{sizes[label]}"
                               for label, index in self.items()) + "}"

    def __repr__(self):
        return f"Point(rank={self.rank}, {dict(self)})"


class _Sliceable:
    _shape: Shape

    def _with(self, shape: Shape):
        raise NotImplementedError

    @property
    def sizes(self) -> Dict[str, int]:
        return dict(self._shape.sizes)

    def size(self, dim=None) -> int:
        """How many members: all (no dim), of one dimension, or the product of
        several (a sequence of labels); KeyError for a label it has not."""
        if dim is None:
            return len(self._shape)
        total = 1
        for label in ([dim] if isinstance(dim, str) else dim):
            if label not in self._shape.labels:
                raise KeyError(f"{self._shape} does not have dimension {label!r}")
            total *= self._shape.size(label)
        return total

    def __len__(self):
        return len(self._shape)

    @property
    def shape(self) -> Shape:
        return self._shape

    def survivors(self):
        """The same over its live ranks only (those whose process is not
        lost), so a program carries on after a loss: itself when none is
        lost, else one dimension ``ranks`` over the live ranks in rank order
        (no stride describes what is left). Raises SupervisionError when
        every rank is lost."""
        ranks = self._shape.ranks()
        live = sorted(rank for rank in ranks if _crown.alive(rank))
        if len(live) == len(ranks):
            return self
        if not live:
            raise SupervisionError(f"every rank of {self._shape} has been lost")
        return self._with(Shape.of_ranks("ranks", live))

    def slice(self, **dims):
        """``slice(procs=0)`` removes a dimension, ``slice(procs=slice(0, 4, 2))``
        keeps it, restricted (every other label too), as Monarch's
        MeshTrait.slice, one dimension after another: TypeError for a label
        the mesh has not, IndexError for an index outside its dimension, and
        Shape.select's ValueError for a slice that selects nothing there."""
        shape = self._shape
        for label, selector in dims.items():
            if label not in shape.labels:
                raise TypeError(f"Shape does not have dimension labeled {label!r} "
                                f"(its dimensions: {shape.labels})")
            if isinstance(selector, slice):
                shape = shape.select(label, selector)
                continue
            index, size = operator.index(selector), shape.size(label)
            if not 0 <= index < size:
                raise IndexError(f"index out of range: {label}={index} in a dimension of size "
                                 f"{size}")
            shape = shape.at(label, index)
        return self._with(shape)

    def flatten(self, name: str):
        return self._with(self._shape.flatten(name))

    def rename(self, **names):
        shape = self._shape
        for old, new in names.items():
            shape = shape.rename(old, new)
        return self._with(shape)

    def split(self, **dims):
        """``split(procs=(("a", 2), ("b", 2)))``: one dimension becomes several."""
        shape = self._shape
        for label, parts in dims.items():
            shape = shape.split(label, list(parts))
        return self._with(shape)


class ValueMesh(_Sliceable, Generic[R]):
    """Replies of a mesh call, one per actor, by coordinates. Slices like a
    mesh (``slice``, ``flatten``, ``rename``, ``split``); iterating it yields
    ``(point, value)``, as ``items()`` does."""

    def __init__(self, shape: Shape, entries: List[Tuple[int, Any, Optional[BaseException]]]):
        self._shape = shape
        self._entries = entries  # (rank, value, error) in row-major order

    def _with(self, shape):
        by_rank = {entry[0]: entry for entry in self._entries}
        return ValueMesh(shape, [by_rank[rank] for rank in shape.ranks()])

    def item(self, **coords) -> R:
        """The value at coords (one index per dimension; none needed for a
        mesh of one); raises its error."""
        if not coords and len(self._entries) == 1:
            index = 0
        else:
            index = self._shape.index_of(self._shape.rank(coords))
        rank, value, error = self._entries[index]
        if error is not None:
            raise error
        return value

    def items(self) -> Iterator[Tuple[Point, R]]:
        """(point, value) for every actor; raises at the first failed one."""
        for rank, value, error in self._entries:
            if error is not None:
                raise error
            yield Point(rank, self._shape), value

    __iter__ = items

    def values(self) -> List[R]:
        return [value for _, value in self.items()]

    def errors(self) -> List[Tuple[int, BaseException]]:
        """(rank, error) of each member that failed, in row-major order."""
        return [(rank, error) for rank, _, error in self._entries if error is not None]

    def __repr__(self):
        shown = [repr(e if e is not None else v) for _, v, e in self._entries]
        return f"ValueMesh({self._shape}, [{', '.join(shown)}])"
