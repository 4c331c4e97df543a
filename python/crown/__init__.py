"""crown: a single-controller runtime for SPMD launches (mpirun, srun, sbatch).

Every rank runs the same script; ``crown.run(main)`` runs ``main()`` on rank 0
(the controller) while the other ranks serve its actors, and every rank exits
0 when it returns (non-zero, with the error printed once, when it raises)::

    import crown
    from crown.actor import Actor, endpoint

    class Counter(Actor):
        def __init__(self, start):
            self.value = start

        @endpoint
        def incr(self, by=1):
            self.value += by
            return self.value

    def main():
        counters = crown.world().spawn("counter", Counter, 0)
        print(counters.incr.call(2).get())

    crown.run(main)
"""

import os
import signal
import sys
import traceback

from . import _client, _context, _crown, _exit_codes, _pdb, _placement, _stacks
from . import _runtime  # noqa: F401 - wraps Thread.start before user code runs (issue 44)

# With CROWN_MALLOC=keep, glibc's malloc keeps what it frees: set before
# torch's threads make malloc arenas of their own (bootstrap/malloc_policy.h).
_crown.keep_malloc_memory()
from .actor import ProcMesh
from . import _logs
from ._attach import AttachError, Attachment, attach, attachment, detach

__all__ = ["run", "init", "world", "world_flat", "shutdown", "Controller", "attach", "detach",
           "attachment", "Attachment", "AttachError", "fetch_shard", "inspect",
           "remote", "no_mesh", "Stream", "RemoteException", "slice_mesh", "to_mesh"]

_TENSOR_NAMES = {"fetch_shard", "inspect", "remote", "no_mesh", "Stream", "RemoteException",
                 "slice_mesh", "to_mesh"}


def __getattr__(name):
    # crown.tensor imports torch: only when a program uses it.
    if name in _TENSOR_NAMES:
        from . import tensor

        return getattr(tensor, name)
    raise AttributeError(f"module 'crown' has no attribute {name!r}")


def init(argv=None) -> "Controller":
    """Bootstraps this rank. Rank 0 gets the Controller back; every other rank
    serves until the controller is done and then exits (this never returns
    there). Collective: every rank must call it."""
    if not _crown.initialised():
        rank = _crown.init(list(sys.argv if argv is None else argv))
        _stacks.install()  # procs.stacks() reaches this rank's Python threads from here on
        _logs.install(rank)  # a worker's output reaches the controller's terminal
        _pdb.install()  # breakpoint() in an endpoint is served to `crown debug`
        _context.tracing = _crown.tracing()
        _context.front_end_ready.set()  # actors may be built here from now on
        if rank != 0:
            _exit(_crown.serve())
    return Controller()


def _exit(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if _crown.owns_mpi():
        os._exit(code)  # MPI is finalised; skip an interpreter teardown that has no more to do
    sys.exit(code)  # MPI belongs to the program (mpi4py): its exit handlers finalise it


class Controller:
    """What rank 0 holds: the world, and the end of the job."""

    @property
    def size(self) -> int:
        return _crown.size()

    def world(self) -> ProcMesh:
        return world()

    def shutdown(self, code: int = 0) -> None:
        shutdown(code)


def world() -> ProcMesh:
    """Every rank of the launch as {"hosts": H, "procs": P} (rank 0 left out
    under crown.run(main, controller="dedicated")); raises ValueError (saying
    why) when the hosts hold different numbers of ranks."""
    return ProcMesh(_placement.without_controller(_crown.world_shape(), flat=False))


def world_flat() -> ProcMesh:
    """Every rank of the launch as {"ranks": N} (ranks 1..N-1 under
    crown.run(main, controller="dedicated"))."""
    return ProcMesh(_placement.without_controller(_crown.Shape([("ranks", _crown.size())]),
                                                  flat=True))


def shutdown(code: int = 0) -> int:
    """Ends the job from the controller: every worker exits with code, which
    is 1 at least after a fault that nothing handled
    (crown.actor.unhandled_fault_hook); returns the code."""
    if _context.served:
        raise RuntimeError("this job is served (crownrun --serve): its mesh outlives the "
                           "scripts run in it; `crown stop` ends it")
    if _crown.unhandled_faults() and code == 0:
        code = 1
    _logs.flush()  # every worker's output so far, before the job ends
    engines = sys.modules.get("crown.tensor._engine")
    if engines is not None:
        engines.finish_all()  # no tensor work left running while the ranks exit
    _crown.shutdown(code)
    return code


def run(main, *args, controller: str = "shared", **kwargs) -> None:
    """Runs main(*args, **kwargs) on rank 0 while the other ranks serve; exits
    the process with 0, or 1 after printing the error once if main raised;
    sys.exit(code) in main ends the job as it ends a Python script.
    ``controller="dedicated"`` keeps rank 0 to controlling: the world meshes
    are ranks 1..N-1 (the default "shared" makes rank 0 a member too).
    In a served job (``crown console --run``) it just runs main, and
    returns or raises."""
    _placement.choose(controller)  # ValueError on every rank alike, before bootstrap
    if _context.served:
        main(*args, **kwargs)  # a script in a served job (crown console --run): the job lives on
        return
    init()
    outcome = None
    try:
        main(*args, **kwargs)
    except BaseException as error:  # noqa: BLE001 - judged below, once interrupts are masked
        outcome = error
    while True:  # a fault's SIGINT comes once, and may land before the mask
        try:
            _mask_interrupts()
            break
        except KeyboardInterrupt as late:
            outcome = outcome or late
    _exit(shutdown(_outcome_code(outcome)))


# A process that no launcher started becomes the controller through these,
# and Monarch's workers serve by run (_client.py, which sits below this
# module).
_client.use(init, shutdown, run)


def _mask_interrupts() -> None:
    # From main's end on, no interrupt (an unhandled fault's SIGINT, which
    # may come late or while the job shuts down) cuts crown.run's report or
    # the shutdown: SIGINT is blocked on this thread, and one already caught
    # is dropped.
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, lambda signum, frame: None)
    except ValueError:  # not the main thread: no interrupt is aimed here
        pass


def _outcome_code(outcome) -> int:
    """The job's exit code after main ended with `outcome` (None: returned),
    its error printed once."""
    sys.stdout.flush()
    if outcome is None:
        return 0
    faulted = bool(_crown.unhandled_faults())
    if isinstance(outcome, _crown.UnhandledFault) or (
            isinstance(outcome, KeyboardInterrupt) and faulted):
        print(f"crown: main was interrupted ({type(outcome).__name__}) by the unhandled failure "
              "above; the job ends with code 1", file=sys.stderr)
        return 1
    if isinstance(outcome, SystemExit):  # sys.exit() in main: the job ends as the script said
        return _exit_codes.exit_code(outcome)
    print("crown: the controller failed:", file=sys.stderr)
    traceback.print_exception(type(outcome), outcome, outcome.__traceback__)
    return 1
