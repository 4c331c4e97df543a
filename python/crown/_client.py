"""Processes on demand (issue 46; docs/processes.md).

A process that no launcher started (a plain ``python3``, a notebook's
kernel, ``python3 -m pytest``) becomes crown's controller on its first use,
as an MPI singleton, with no setup call: Monarch's client. Its
``this_host().spawn_procs(...)`` starts worker processes with
MPI_Comm_spawn, each running crown._spawned; the procs of one call share an
MPI world (tensor collectives among them run over MPI). ProcMesh.stop() ends
them; so do the controller's exit (atexit) and its death, since Open MPI's
runtime, a child of this process, takes its children with it.

Classes and functions of the client's ``__main__`` travel by value
(_pickle.main_by_value): its workers do not run its script.

Only the controller starts and stops processes; a started proc asks it
(_hosts.py forwards). This module sits low in the package: crown's own
init() and shutdown() reach it through use() (crown/__init__.py), not by
import.
"""

import atexit
import json
import sys
import threading
from typing import Callable, Dict, List, Optional, Tuple

from . import _crown, _pickle

_lock = threading.Lock()
_init: Optional[Callable[[], object]] = None  # crown.init, given by use()
_shutdown: Optional[Callable[[int], object]] = None  # crown.shutdown, given by use()
run: Optional[Callable[..., None]] = None  # crown.run, given by use(): Monarch's workers serve by it
_groups: Dict[tuple, "Starting"] = {}  # the ranks of each spawn_procs call, until stopped
WORKER = ["-m", "crown._spawned"]  # what each started proc runs, after its interpreter


def starts_procs() -> bool:
    """True where procs are started on demand rather than handed out from a
    launch: in a controller that no launcher started, and in a proc that was
    started (its spawn_procs asks the controller, which alone starts them).
    Not in a client attached to a served job: it hands out the job's ranks."""
    if _crown.initialised() and _crown.attached():
        return False
    if _crown.launched_alone():
        return True
    return _crown.initialised() and _crown.rank() not in _crown.world_shape().ranks()


def use(init: Callable[[], object], shutdown: Callable[[int], object],
        run_main: Callable[..., None]) -> None:
    """crown/__init__.py gives its init() and shutdown(), which this module
    calls to make a process the controller and to end its procs at exit,
    and run(), which the modules below crown's call as crown.run."""
    global _init, _shutdown, run
    _init, _shutdown, run = init, shutdown, run_main


def forwarded() -> bool:
    """Whether this process asks the controller to start and stop procs."""
    return _crown.initialised() and _crown.rank() != 0


def ensure_started() -> None:
    """Makes this process the controller on its first use, where no launcher
    started it; under mpirun or srun every rank must call crown.init() or
    crown.run(main) itself (bootstrap is collective), so this raises there."""
    if _crown.initialised():
        return
    if not _crown.launched_alone():
        raise RuntimeError("crown is not initialised in this process: a program that mpirun "
                           "or srun starts calls crown.run(main) or crown.init() on every rank "
                           "first")
    with _lock:
        if _crown.initialised():
            return
        _init()
        _pickle.main_by_value(True)
        atexit.register(_end)


class Starting:
    """The start of one group of procs, under way on a thread of its own
    (spawn_procs returns at once, as Monarch's does): wait() returns once
    they are up, or raises why they are not."""

    def __init__(self, run: Callable[[], None]):
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        threading.Thread(target=self._run, args=(run,), name="crown-start", daemon=True).start()

    def _run(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as e:  # noqa: BLE001 - the waiter raises it
            self._error = e
        finally:
            self._done.set()

    def wait(self, timeout: Optional[float] = None) -> None:
        if not self._done.wait(timeout):
            raise TimeoutError(f"the procs did not start within {timeout} s")
        if self._error is not None:
            raise self._error


def start(program: str, settings: List[dict], host: Optional[str] = None,
          then: Optional[Callable[[List[int]], None]] = None) -> Tuple[List[int], Starting]:
    """Starts one proc of `program` (a Python interpreter) per entry of
    `settings` (_spawn_options.per_proc), in one MPI world, on `host` (None:
    where Open MPI places them). Returns their ranks at once, reserved, and
    the Starting that says when they are up (and `then(ranks)` has run).
    Raises at once where no process can be started (srun, spares spent).
    On the controller only (forwarded())."""
    ensure_started()
    _pickle.main_by_value(True)  # the procs do not run this program's __main__
    # The controller's sys.path goes along: what it imports (a test's own
    # module, a notebook's sys.path.append) the procs import too.
    arguments = WORKER + [json.dumps(sys.path), json.dumps(settings)]
    ranks = list(_crown.reserve_procs(len(settings)))

    def run():
        _crown.spawn_procs(ranks, program, arguments, host or "")
        if then is not None:
            then(ranks)

    starting = Starting(run)
    with _lock:
        _groups[tuple(ranks)] = starting
    return ranks, starting


def stop(ranks: List[int]) -> None:
    """Ends the procs of one start() (their actors are stopped already),
    once their start is over. On the controller only (forwarded())."""
    with _lock:
        starting = _groups.pop(tuple(ranks), None)
    if starting is None:
        return  # stopped already: stop() twice is a no-op, as in Monarch
    try:
        starting.wait()
    except Exception:  # noqa: BLE001 - those that could not start have nothing to end
        pass
    alive = [rank for rank in ranks if _crown.alive(rank)]
    if alive:
        _crown.stop_spawned(alive)


def stop_all() -> None:
    """Ends every proc this controller started and has not stopped."""
    with _lock:
        groups = list(_groups)
    for ranks in groups:
        stop(list(ranks))


def _end() -> None:
    # The interpreter exits: every proc this controller started goes with it.
    # crown.shutdown ends them all at once (and is a no-op after a shutdown).
    if _crown.initialised() and _crown.rank() == 0:
        _shutdown(0)
