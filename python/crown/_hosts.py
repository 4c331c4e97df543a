"""Hosts: HostMesh and this_host() (issue 46; docs/processes.md).

A HostMesh is hosts with a "hosts" dimension (this_host() is one host and
gives procs without it). Its spawn_procs gives procs that no earlier call
gave, laid out as the hosts' dimension followed by per_host's, row-major:
  - under a launch (mpirun, srun), the launch's ranks on each host that no
    earlier spawn_procs took, the same ones on every host; when they run
    out, new processes where the launcher can start them (mpirun, on one
    host) and ValueError where it cannot (srun);
  - in a controller that no launcher started, new processes (_client.py),
    on this machine: its hosts are this machine's, as many as the HostMesh
    says (a ProcessJob's), each with its own procs.
"""

from __future__ import annotations

import inspect
import math
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from . import _client, _context, _crown, _placement
from ._endpoints import Actor, endpoint
from ._meshes import ActorMesh, ProcMesh, Shape, this_proc
from ._spawn_options import BootstrapCommand
from ._values import Future, Point

HOSTS = "hosts"


class HostMesh:
    """Hosts that procs are spawned on, as in Monarch.

    Under a launch each host holds the ranks the launch started on it;
    procs() shares them, and spawn_procs() hands them out once each. In a
    controller that no launcher started, spawn_procs() starts processes."""

    def __init__(self, launch: Optional[Shape], hosts: int = 1, labelled: bool = True,
                 command: Optional[BootstrapCommand] = None, owner: bool = True):
        # launch: {"hosts": H, "procs": P}, the launch's ranks by host; None
        # where procs are all started (then `hosts` says how many).
        self._launch = launch
        self._hosts = launch.size(HOSTS) if launch is not None else hosts
        self._labelled = labelled  # False: this_host(), whose procs have no "hosts" dimension
        self._command = command  # with_python_executable's; None: this interpreter
        self._owner = owner  # False for a slice or a pickled copy: it cannot shut hosts down
        self._spawned: List[ProcMesh] = []  # the started procs, which shutdown() ends
        self._shut_down = False

    @property
    def sizes(self) -> Dict[str, int]:
        return {HOSTS: self._hosts} if self._labelled else {}

    @property
    def ranks(self) -> List[int]:
        """The ranks the launch started on these hosts ([] without a launch)."""
        return self._launch.ranks() if self._launch is not None else []

    @property
    def initialized(self) -> Future:
        """Monarch's: a Future of True once the hosts are up (they are)."""
        return Future(lambda timeout: True)

    def slice(self, **coordinates) -> "HostMesh":
        """The hosts at coordinates["hosts"] (an index, which keeps the
        dimension with size 1, or a slice): a HostMesh that spawns there and
        cannot shut down (only its owner can)."""
        unknown = set(coordinates) - {HOSTS}
        if unknown or not self._labelled:
            raise TypeError(f"a HostMesh slices along {sorted(self.sizes)}, not {sorted(unknown)}")
        which = coordinates.get(HOSTS, slice(None))
        hosts = range(self._hosts)
        indices = hosts[which] if isinstance(which, slice) else [hosts[which]]
        if not indices or (isinstance(indices, range) and indices.step != 1):
            raise IndexError(f"hosts={which!r} selects no consecutive hosts of {self._hosts}")
        first, count = indices[0], len(indices)
        launch = (self._launch.select({HOSTS: slice(first, first + count)})
                  if self._launch is not None else None)
        return HostMesh(launch, count, True, self._command, owner=False)

    def procs(self, per_host: Optional[Dict[str, int]] = None) -> ProcMesh:
        """The first ``prod(per_host.values())`` ranks of each host's launch,
        as a ProcMesh of the hosts' dimension and per_host's; without
        per_host, one proc per host. Calling it twice gives the same ranks
        again, each able to host actors of its own; no process is started.
        Raises ValueError when more procs are asked than the launch started
        on a host, or there is no launch."""
        per_host = _checked(per_host, self._labelled)
        wanted = math.prod(per_host.values())
        if self._launch is None:
            raise ValueError("procs() shares the launch's ranks, and no launcher started this "
                             "job: spawn_procs() starts processes")
        available = self._launch.size("procs")
        if wanted > available:
            raise ValueError(f"procs(per_host={per_host}) asks for {wanted} procs per host, but "
                             f"the launch started {available} on each")
        return ProcMesh(self._laid_out(self._launch.select({"procs": slice(0, wanted)}), per_host))

    def spawn_procs(self, per_host: Optional[Dict[str, int]] = None,
                    bootstrap: Optional[Callable[[], Any]] = None, name: Optional[str] = None,
                    proc_bind: Optional[List[Dict[str, str]]] = None,
                    bootstrap_command=None) -> ProcMesh:
        """``prod(per_host.values())`` procs per host (one without per_host)
        as a ProcMesh of the hosts' dimension and per_host's, as in Monarch:
        procs that no earlier call gave (this module's docstring says
        where they come from). It returns at once: started processes come
        up meanwhile (``procs.initialized`` says when), and whatever needs
        them waits for them; ProcMesh.stop() ends them, as does the
        controller's exit.

        ``bootstrap`` runs on each proc before it is handed out (its failure
        fails ``procs.initialized`` with an ActorError); ``proc_bind`` (one
        dict per proc of a host: cpus, physcpubind or cpunodebind) pins each
        proc to CPUs; ``bootstrap_command`` (a BootstrapCommand, or a
        function of a Point giving one) sets the program and environment
        each proc starts with. These two apply to started processes: with
        the launch's ranks they raise ValueError. ``name`` names the mesh."""
        if self._shut_down:
            raise RuntimeError("HostMesh has already been shut down")
        per_host = _checked(per_host, self._labelled)
        wanted = max(math.prod(per_host.values()), 1)
        host = None
        if not _client.starts_procs():
            starting_how = (bootstrap_command, proc_bind) != (None, None)
            ranks = self._free_launch_ranks(wanted, take=not starting_how)
            if ranks is not None:
                if starting_how:
                    raise ValueError("proc_bind and bootstrap_command set how processes start; "
                                     "the launch's ranks started already (ask for more procs "
                                     "than the launch has free to start new ones)")
                return _bootstrapped(ProcMesh(self._laid_out(ranks, per_host), name=name),
                                     bootstrap)
            refusal = _crown.spawn_refusal()
            if not refusal and self._hosts > 1:
                refusal = "crown starts processes under a launch on one host at a time"
            if refusal:
                raise ValueError(f"spawn_procs(per_host={per_host}) asks for {wanted} procs per "
                                 f"host, but the launch's ranks there were handed out by earlier "
                                 f"spawn_procs calls (procs() shares them), and {refusal}")
            host = self._launch_host_name()
        return self._start(per_host, wanted, bootstrap, name, proc_bind, bootstrap_command, host)

    def _start(self, per_host, wanted, bootstrap, name, proc_bind, bootstrap_command,
               host) -> ProcMesh:
        from . import _spawn_options

        dims = ([(HOSTS, self._hosts)] if self._labelled else []) + list(per_host.items())
        layout = Shape(dims) if dims else Shape([("procs", 1)])
        points = [Point(rank, layout) for rank in range(self._hosts * wanted)]
        if proc_bind is not None and len(proc_bind) != wanted:
            raise ValueError(f"proc_bind length ({len(proc_bind)}) must equal procs_per_host "
                             f"({wanted})")
        binding = proc_bind * self._hosts if proc_bind is not None else None
        program, settings = _spawn_options.per_proc(
            self._hosts * wanted, points, bootstrap_command,
            self._command or _spawn_options.default_bootstrap_cmd(), binding)
        def shape_of(ranks: List[int]) -> Shape:
            return self._laid_out(Shape([HOSTS, "procs"], _Run(ranks[0], [self._hosts, wanted])),
                                  per_host)

        def bootstrapped(ranks: List[int]) -> None:  # on the start's thread, once they are up
            if bootstrap is not None:
                # A mesh of its own: the returned one waits for this very start.
                runs = ProcMesh(shape_of(ranks)).spawn("crown-bootstrap", _Bootstrap, bootstrap)
                runs.run.call().get()

        started, starting = start_procs(program, settings, host, bootstrapped)
        procs = ProcMesh(shape_of(started), name=name, starting=starting,
                         stop_started=lambda: stop_procs(started))
        self._spawned.append(procs)
        return procs

    def _laid_out(self, grid: Shape, per_host: Dict[str, int]) -> Shape:
        """`grid` ({"hosts": H, "procs": N}) in the hosts' dimension (unless
        this is this_host()) and per_host's; one proc per host without."""
        if not self._labelled:
            grid = grid.select({HOSTS: 0})  # before per_host's, which may name "hosts" then
        return grid.split("procs", list(per_host.items())) if per_host else grid.select(
            {"procs": 0})

    def _free_launch_ranks(self, wanted: int, take: bool = True) -> Optional[Shape]:
        """The launch's procs [k, k + wanted) of every host, none of which an
        earlier spawn_procs took (the first such k), now taken unless not
        `take`; None when there is no launch or no such k."""
        if self._launch is None:
            return None
        per_host = self._launch.size("procs")
        with _handed_out_lock:
            for first in range(per_host - wanted + 1):
                window = self._launch.select({"procs": slice(first, first + wanted)})
                if not _handed_out.intersection(window.ranks()):
                    if take:
                        _handed_out.update(window.ranks())
                        if _context.ranks_handed_out is not None:
                            _context.ranks_handed_out(window.ranks())
                    return window
        return None

    def _launch_host_name(self) -> str:
        """The host that new processes of a one-host launch HostMesh go to."""
        return _crown.host_of(self._launch.ranks()[0]) if self._launch is not None else ""

    def with_python_executable(self, path: str) -> "HostMesh":
        """These hosts, whose later spawn_procs start their procs with the
        interpreter at `path` (Monarch's): a new HostMesh; this one is
        unchanged."""
        from . import _spawn_options

        return HostMesh(self._launch, self._hosts, self._labelled,
                        _spawn_options.BootstrapCommand(path), self._owner)

    def shutdown(self) -> Future:
        """Ends every proc that spawn_procs started through this HostMesh;
        spawning on it then raises RuntimeError. Only the HostMesh that
        this_host() or a job gave (not a slice or a pickled copy) may.
        Returns a done Future."""
        if not self._owner:
            raise RuntimeError("only the HostMesh's owner shuts it down; this is a slice or a "
                               "copy of it")
        self._shut_down = True
        for procs in self._spawned:
            procs.stop()
        self._spawned.clear()
        return Future(lambda timeout: None)

    async def __aenter__(self) -> "HostMesh":
        return self

    async def __aexit__(self, *exc) -> None:
        self.shutdown()

    def __reduce__(self):
        return (HostMesh, (self._launch, self._hosts, self._labelled, self._command, False))

    def __repr__(self):
        where = f"ranks={self.ranks}" if self._launch is not None else "started on demand"
        return f"HostMesh({self.sizes}, {where})"


class _Run:
    """Consecutive ranks, row-major, as Shape(labels, slice) reads a slice."""

    def __init__(self, first: int, sizes: List[int]):
        self.offset, self.sizes = first, list(sizes)
        self.strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]


def _checked(per_host: Optional[Dict[str, int]], labelled: bool) -> Dict[str, int]:
    per_host = dict(per_host or {})
    for label, size in per_host.items():
        if not isinstance(label, str) or not isinstance(size, int) or size < 1:
            raise ValueError(f"per_host={per_host}: each entry must be a dimension name "
                             f"and a size of at least 1, not {label!r}: {size!r}")
    if labelled and HOSTS in per_host:
        raise ValueError(f"per_host labels {list(per_host)} overlap with host labels "
                         f"['{HOSTS}']")
    return per_host


_handed_out: Set[int] = set()  # launch ranks that spawn_procs gave (never twice)
_handed_out_lock = threading.Lock()


def handed_out_before(ranks) -> None:
    """Launch ranks that spawn_procs gave before this process (an earlier
    client of a served job, _attach.py): they are not given again."""
    with _handed_out_lock:
        _handed_out.update(int(rank) for rank in ranks)


class _Bootstrap(Actor):
    """Runs spawn_procs' bootstrap on each proc."""

    def __init__(self, fn):
        self._fn = fn

    @endpoint
    async def run(self) -> bool:
        result = self._fn()
        if inspect.isawaitable(result):
            await result
        return True


def _bootstrapped(procs: ProcMesh, bootstrap) -> ProcMesh:
    """Runs `bootstrap` on every proc of `procs`: procs.initialized is done
    once it has run everywhere, and raises its ActorError if it failed."""
    if bootstrap is None:
        return procs
    runs = procs.spawn("crown-bootstrap", _Bootstrap, bootstrap).run.call()
    procs._initialized = Future(lambda timeout: runs.get(timeout) is not None)
    return procs


def start_procs(program: str, settings: List[dict], host: Optional[str],
                then: Callable[[List[int]], None]) -> Tuple[List[int], "_client.Starting"]:
    """_client.start on the controller, asked of it from a started proc."""
    if _client.forwarded():
        ranks = controller_starter().start_procs.call_one(program, settings, host).get()
        return ranks, _client.Starting(lambda: then(ranks))
    return _client.start(program, settings, host, then)


def stop_procs(ranks: List[int]) -> None:
    """_client.stop on the controller, asked of it from a started proc."""
    if _client.forwarded():
        controller_starter().stop_procs.call_one(ranks).get()
    else:
        _client.stop(ranks)


_controllers: Dict[str, ActorMesh] = {}  # get_or_spawn_controller's, by name
_controllers_lock = threading.Lock()


def get_or_spawn_controller(name: str, cls, *args, **kwargs) -> Future:
    """Monarch's: a Future of the one actor of `cls` named `name` on this
    process (the controller's own proc), spawned with args on the first call
    for that name; later calls give the same one, whatever their args."""
    with _controllers_lock:
        mesh = _controllers.get(name)
        if mesh is None:
            mesh = _controllers[name] = this_proc().spawn(name, cls, *args, **kwargs)
    return Future(lambda timeout: mesh)


def shutdown_context() -> Future:
    """Monarch's: ends every proc this controller started (spawn_procs) and
    has not stopped; a second call does nothing. Returns a done Future."""
    if _crown.initialised():
        _client.stop_all()
    return Future(lambda timeout: None)


class _Starter(Actor):
    """On the controller, which alone starts and stops procs: does it for
    spawn_procs called in a started proc (an actor's endpoint there)."""

    @endpoint
    def start_procs(self, program: str, settings: List[dict], host: Optional[str]) -> List[int]:
        ranks, starting = _client.start(program, settings, host)
        starting.wait()  # the asking proc gets them up, as its own start would
        return ranks

    @endpoint
    def stop_procs(self, ranks: List[int]) -> None:
        _client.stop(ranks)


_starter = None
_starter_lock = threading.Lock()


def controller_starter():
    """This process's _Starter on the controller (rank 0), spawned on first use."""
    global _starter
    with _starter_lock:
        if _starter is None:
            controller = Shape([("ranks", _crown.size())]).select({"ranks": 0})
            _starter = ProcMesh(controller).spawn("crown-starter", _Starter)
        return _starter


def launch_hosts() -> Shape:
    """Every rank of the launch as {"hosts": H, "procs": P} (under
    crown.run(main, controller="dedicated"), each host without its first
    proc, so that rank 0 only controls and every host keeps as many)."""
    world = _crown.world_shape()
    if _placement.controller == "dedicated":
        world = world.select({"procs": slice(1, world.size("procs"))})
    return world


def this_host() -> HostMesh:
    """The host this code runs on, as in Monarch: the controller's in main(),
    an actor's own inside its endpoints; its procs have no "hosts"
    dimension. A process that no launcher started becomes the controller
    here (Monarch's client: _client.py)."""
    _client.ensure_started()
    if _crown.attached():
        raise RuntimeError("this process is a client attached to a served job: its host holds "
                           "none of the job's ranks. Spawn on the job's hosts "
                           "(crown.attach(...).host_mesh), or this_proc() for this process")
    if _client.starts_procs():
        return HostMesh(None, 1, labelled=False)
    world = _crown.world_shape()
    index = world.coordinates(_crown.rank())["hosts"]
    host = world.select({HOSTS: slice(index, index + 1)})
    if _placement.controller == "dedicated" and host.ranks()[0] == 0:
        host = host.select({"procs": slice(1, host.size("procs"))})  # rank 0 only controls
    return HostMesh(host, labelled=False)
