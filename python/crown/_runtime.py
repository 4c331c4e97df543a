"""What the C++ PyActor calls, on the rank that hosts the actor (with the GIL).

construct() builds the actor from its pickled (class, args, kwargs), or
raises ConstructionError holding the Python traceback; dispatch() runs one
pickled endpoint call and returns its outcome: a tag byte, then the pickled
value or, when the endpoint raised, the exception. A BaseException that is
not an Exception (SystemExit, KeyboardInterrupt) kills the actor under any
call: FATAL and a text report, which PyActor throws as ActorFatal.
Otherwise, for a call with a caller (call, call_one, choose, stream) the
exception is pickled (as itself when it pickles, always as its type,
message and traceback text), so it travels as a value and the caller raises
ActorError from it. For a call that nobody answers to (broadcast, a port's
send) or whose replies are folded (Accumulator), it is a text report with
the traceback: PyActor throws it, so a one-way failure is logged on its rank
and the actor dies (its mesh's owner hears: crown._supervision), and a fold
fails that member. The owner hears through the supervision module's
Supervise message to its own actor, so supervise_in_turn() runs in the
actor's turn, between messages.

Endpoints that answer through a port (explicit_response_port, and every
concurrent_endpoint) get the caller's Port as their first argument; an
exception escaping an explicit-port endpoint kills the actor (FATAL), as in
Monarch, since its caller waits on the port, not on the call. An actor class
with a concurrent endpoint gets its own loop thread (_ActorLoop) at its first
concurrent call: from then on its event loop runs between messages too,
concurrent endpoints run on it as tasks (dispatch returns once the task has
run to its first await), and ordinary async endpoints still run one at a
time (dispatch waits for each). release() cancels what still runs.

combine() runs an Accumulator's function at a cast-tree hop (reducer keys
"py:<base64 pickle>", resolved in python/src/bind_reduce.cpp).
"""

import asyncio
import base64
import functools
import inspect
import threading
import traceback
from typing import Optional

from . import _context, _crown, _pdb, _pickle, _supervision
from ._context import _current, current_actor, current_instance
from ._endpoints import endpoint
from ._protocol import (DIE, FATAL, FENCE, RAISED, REDUCER_PREFIX, RREF, STOP,
                        VALUE, message_of as _message_of, raised_body)

STOP_WAIT_S = 5.0  # how long release() waits for cancelled tasks to finish


# Threads an actor starts act for it (issue 44): what they spawn is the
# actor's, and it hears of those meshes' failures. threading.Thread.start is
# wrapped once, here, so that every thread started from an actor's code
# (its endpoints, __init__, loop thread, or a thread it started) enters
# _crown.acting_as for that actor before its run(). A thread started
# otherwise (_thread.start_new_thread, a C extension's) acts for nobody: on a
# worker rank a spawn from it is refused. A long-lived pool first started
# from an actor keeps acting for it.
_thread_start = threading.Thread.start


def _start_acting(thread, *args, **kwargs):
    acting = _crown.acting_actor()
    if acting is not None:
        run = thread.run

        def run_acting():
            with _crown.acting_as(*acting):
                run()

        thread.run = run_acting
    return _thread_start(thread, *args, **kwargs)


threading.Thread.start = _start_acting


class ConstructionError(Exception):
    """An actor's class could not be built here; str() is the Python traceback."""


def construct(payload: bytes):
    _context.front_end_ready.wait(_context.FRONT_END_WAIT_S)  # an actor's first code on this rank
    _current.instance = None
    try:
        cls, args, kwargs = _pickle.loads(payload)
        return cls(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - reported to the spawner as its traceback
        raise ConstructionError(traceback.format_exc().rstrip()) from None


def _event_loop(instance):
    # One loop per actor runs its async endpoints. Until the actor's first
    # concurrent call it runs only while a message is handled (on the pool
    # thread, run_until_complete); then on the actor's loop thread.
    loop = instance.__dict__.get("_crown_loop")
    if loop is None:
        loop = asyncio.new_event_loop()
        instance.__dict__["_crown_loop"] = loop
    return loop


def _complete(instance, awaitable):
    """Runs an async endpoint (or __supervise__) to its end for dispatch: on
    the actor's loop thread when it has one (its concurrent tasks run
    meanwhile), else on this thread."""
    loop = instance.__dict__.get("_crown_loop_thread")
    if loop is not None:
        return loop.wait(awaitable)
    return _event_loop(instance).run_until_complete(awaitable)


class _Guarded:
    """An outcome that crossed from the loop thread: a BaseException must not
    escape a task (SystemExit and KeyboardInterrupt would stop the loop)."""

    def __init__(self, error):
        self.error = error


async def _guarded(awaitable):
    try:
        return await awaitable
    except BaseException as error:  # noqa: BLE001 - re-raised on the dispatching thread
        return _Guarded(error)


class _ActorLoop:
    """The loop thread of one actor (one whose class has a concurrent
    endpoint): runs the actor's event loop from its first concurrent call
    until release(). Start order (ORD-1 gives message order from one
    sender): dispatch returns from a concurrent call only once its task has
    run to its first await (or is waiting for a slot), so the actor's next
    message sees what the body did before awaiting; tasks waiting for a slot
    of the same endpoint take them in arrival order. Ordinary async endpoints
    run here too, one at a time: dispatch waits for each. Code here runs
    outside the C++ handler: here() falls back to what was captured from the
    dispatching thread, current_actor() is the actor (the thread acts for it),
    and its sends leave as from the process (rank, 0), not as from the actor."""

    def __init__(self, instance):
        self.loop = _event_loop(instance)
        self.here = _crown.here()
        self.actor = _crown.acting_actor()  # its thread acts for it (Thread.start, above)
        self.slots = {}  # endpoint name -> asyncio.Semaphore of its bound
        self.kept = []  # ports of bodies that ended with the actor: held until it goes
        self.stopping = False
        self.thread = threading.Thread(
            target=self._main, args=(instance,), daemon=True,
            name=f"crown-loop-{type(instance).__qualname__}")
        self.thread.start()

    def _main(self, instance):
        _current.instance = instance
        _current.loop = self
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def wait(self, awaitable):
        outcome = asyncio.run_coroutine_threadsafe(_guarded(awaitable), self.loop).result()
        if isinstance(outcome, _Guarded):
            raise outcome.error
        return outcome

    def start(self, instance, ep, args, kwargs):
        """Starts a concurrent endpoint's task; returns once it has run to
        its first await."""
        started = threading.Event()

        def create():
            try:
                self.loop.create_task(self._body(instance, ep, args, kwargs))
            finally:
                self.loop.call_soon(started.set)  # after the task's first step

        self.loop.call_soon_threadsafe(create)
        started.wait()
        return None

    async def _body(self, instance, ep, args, kwargs):
        port, args = args[0], args[1:]
        slots = self.slots.get(ep.name)
        if slots is None:
            slots = self.slots[ep.name] = asyncio.Semaphore(ep.concurrent)
        try:
            async with slots:  # at the bound: waits (backpressure), not an error
                if ep.explicit_response_port:
                    await ep.fn(instance, port, *args, **kwargs)
                else:
                    port.send(await ep.fn(instance, *args, **kwargs))
        except asyncio.CancelledError as error:
            if self.stopping:
                # The actor stops: nothing to report. Its port is kept until
                # the actor goes, so that the caller hears it stopped, not
                # that the port was dropped.
                self.kept.append(port)
                return
            if not ep.explicit_response_port:
                self._forward(instance, ep, port, error)
        except Exception as error:
            _pdb.post_mortem_if_asked(error)
            if ep.explicit_response_port:
                self._kill(instance, ep, port, error)
            else:
                self._forward(instance, ep, port, error)
        except BaseException as error:  # noqa: BLE001 - SystemExit and the like kill the actor
            self._kill(instance, ep, port, error)

    def _forward(self, instance, ep, port, error):
        # Monarch's concurrent endpoint forwards its body's exception to the
        # caller (ActorError there); a port that cannot take it (a broadcast's
        # dropping port raises it) leaves it unhandled: the actor dies.
        try:
            port.exception(error)
        except BaseException:  # noqa: BLE001 - whatever it was, it reached nobody
            self._kill(instance, ep, port, error)

    def _kill(self, instance, ep, port, error):
        """A failure no caller hears of: the actor dies of it, as in Monarch.
        The actor refuses its next message with FATAL (_run) and is sent one
        itself, so it dies even if nothing else comes; the port hears as it
        dies holding it (a native port's holder gone), and so its caller."""
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        report = (f"concurrent endpoint {ep.name!r} of {type(instance).__qualname__} raised "
                  f"{type(error).__qualname__}: {_message_of(error)} (not sent to its port, so "
                  f"the actor dies of it)\n{text}")
        instance.__dict__["_crown_dying"] = report
        self.kept.append(port)  # its caller hears the actor's death, not a dropped port
        try:
            if self.actor is not None:
                _crown.send(self.actor[0], self.actor[1],
                            *_pickle.dumps_parts((DIE, (report,), {})))
        except Exception:  # noqa: BLE001 - the actor may be gone already
            traceback.print_exc()

    def stop(self):
        """Cancels every task still running and ends the thread (waits up to
        STOP_WAIT_S for the tasks' own handling of the cancellation)."""
        def begin():
            self.stopping = True
            self.loop.create_task(self._cancel_all())

        try:
            self.loop.call_soon_threadsafe(begin)
        except RuntimeError:  # closed already
            return
        if threading.current_thread() is not self.thread:
            self.thread.join(STOP_WAIT_S + 1.0)

    def cancel_tasks(self):
        """Cancels every task still running and waits (up to STOP_WAIT_S) for
        their own handling of it, leaving the loop up: as in Monarch, an
        actor's tasks are done before its __cleanup__ runs (on this loop)."""
        if threading.current_thread() is self.thread:
            return  # called from a task: the stop that follows cancels them

        async def cancel():
            self.stopping = True
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=STOP_WAIT_S)

        try:
            asyncio.run_coroutine_threadsafe(cancel(), self.loop).result(STOP_WAIT_S + 1.0)
        except (RuntimeError, TimeoutError):  # closed already, or tasks that ignore cancel
            pass

    async def _cancel_all(self):
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_S)
        self.loop.stop()


def _actor_loop(instance) -> _ActorLoop:
    loop = instance.__dict__.get("_crown_loop_thread")
    if loop is None:
        loop = instance.__dict__["_crown_loop_thread"] = _ActorLoop(instance)
    return loop


_endpoints = {}  # (class, name) -> the endpoint: found once, not per message


def _endpoint_of(cls, name):
    found = _endpoints.get((cls, name))
    if found is None:
        if type(name) is tuple:  # as_endpoint(mesh.method): (METHOD, method, explicit)
            _, method, explicit = name
            found = inspect.getattr_static(cls, method, None)
            if not isinstance(found, endpoint):
                if not inspect.isfunction(found):
                    raise AttributeError(f"{cls.__name__} has no method {method!r}")
                found = endpoint(found, explicit_response_port=explicit)
                found.name = method
        else:
            found = inspect.getattr_static(cls, name, None)
            if not isinstance(found, endpoint):
                raise AttributeError(f"{cls.__name__} has no endpoint {name!r}")
        _endpoints[(cls, name)] = found
    return found


def dispatch(instance, payload, report: bool = False):
    """Runs one pickled call (a RawCall's, direct or cast, py_actor.h);
    returns the tag and the pickled outcome as (head, buffers), for the
    fabric to send without a copy (_pickle.dumps_parts). report: an
    exception comes back as RAISED + its text report (utf-8), not pickled,
    for the C++ side to throw; a fatal one (not an Exception) always comes
    back so, as FATAL."""
    outcome = _run(instance, payload, report)
    return outcome if isinstance(outcome, tuple) else (outcome, [])


def _run(instance, payload, report):
    outer = current_instance()
    _current.instance = instance
    name = None
    ep = None
    try:
        name, args, kwargs = _pickle.loads(payload)
        rref = None
        if type(name) is tuple and name[0] == RREF:  # rref: keep the result on this rank's engine
            _, name, engine, ref = name
            rref = (engine, ref)
        dying = instance.__dict__.get("_crown_dying")
        if dying is not None:  # a concurrent task failed: the actor dies now
            return FATAL + dying.encode("utf-8", "backslashreplace")
        if name == STOP:
            failed = finish(instance, None)
            if failed is not None:  # Monarch: a supervision event; the actor dies of it
                return FATAL + failed.encode("utf-8", "backslashreplace")
            result = None
        elif name == FENCE:
            result = None
        elif name == DIE:
            return FATAL + args[0].encode("utf-8", "backslashreplace")
        else:
            ep = _endpoint_of(type(instance), name)
            name = ep.name  # as_endpoint's is a tuple
            if _context.tracing:  # the handler's span reads "actor endpoint", not the pickled call's type
                _crown.trace_endpoint(name)
            if ep.concurrent is not None:
                result = _actor_loop(instance).start(instance, ep, args, kwargs)
            else:
                result = ep.fn(instance, *args, **kwargs)
        if inspect.isawaitable(result):
            result = _complete(instance, result)
        if rref is not None:
            from .tensor._engine import keep_on_engine

            result = keep_on_engine(*rref, result)
        return _pickle.dumps_parts(result, VALUE)
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        if ep is not None and isinstance(error, Exception):
            _pdb.post_mortem_if_asked(error)  # CROWN_DEBUG_POST_MORTEM: before the caller hears
        _current.error = error  # for dying(), should this failure kill the actor
        text = traceback.format_exc()
        message = _message_of(error)
        # An explicit-port endpoint's caller waits on the port, not on this
        # call: an exception escaping it reaches nobody, so the actor dies
        # (Monarch's rule), under any adverb.
        explicit = ep is not None and ep.explicit_response_port
        if report or explicit or not isinstance(error, Exception):
            where = f"endpoint {name!r}" if name is not None else "a call that did not unpickle"
            tag = RAISED if isinstance(error, Exception) and not explicit else FATAL
            note = " (not sent to its port, so the actor dies of it)" if explicit else ""
            return tag + (f"{where} of {type(instance).__qualname__} raised "
                             f"{type(error).__qualname__}: {message}{note}\n{text}").encode(
                                 "utf-8", "backslashreplace")
        return RAISED + raised_body(error, text)
    finally:
        _current.instance = outer


class UnhandledFailure(Exception):
    """An actor's __supervise__ did not handle a failure of a mesh it owns
    (it is missing or returned false): the actor dies of it, and its owner
    hears in turn."""


def supervise(instance, failure):
    """Hands a failure of a mesh the actor owns to its __supervise__ (plain
    or async); raises when it is not handled, or when __supervise__ raises
    (a new failure, caused by the first)."""
    method = getattr(instance, "__supervise__", None)
    cls = type(instance).__qualname__
    if method is None:
        raise UnhandledFailure(f"{cls} has no __supervise__ for the failure of its mesh "
                               f"'{failure.mesh_name}':\n{failure.report()}")
    try:
        handled = method(failure)
        if inspect.isawaitable(handled):
            handled = _complete(instance, handled)
    except Exception as error:
        raise UnhandledFailure(f"{cls}.__supervise__ raised {type(error).__qualname__}: "
                               f"{_message_of(error)}, handling the failure of its mesh "
                               f"'{failure.mesh_name}':\n{failure.report()}") from error
    if not handled:
        raise UnhandledFailure(f"{cls}.__supervise__ did not handle the failure of its mesh "
                               f"'{failure.mesh_name}':\n{failure.report()}")
    return None


def supervise_in_turn(instance, failure) -> bytes:
    """PyActor's handler of the supervision module's report (a member of a
    mesh the actor owns died), in the actor's turn: VALUE when __supervise__
    handled it; otherwise RAISED (FATAL for a BaseException such as
    SystemExit) and the text the actor dies of, so that its own owner hears."""
    outer = current_instance()
    _current.instance = instance
    try:
        dying = instance.__dict__.get("_crown_dying")
        if dying is not None:  # a concurrent task failed: the actor dies now
            return FATAL + dying.encode("utf-8", "backslashreplace")
        supervise(instance, failure)
        return VALUE
    except BaseException as error:  # noqa: BLE001 - the actor dies of it, its owner hears
        _current.error = error  # for dying()
        tag = RAISED if isinstance(error, Exception) else FATAL
        return tag + (f"{type(error).__qualname__}: {_message_of(error)}\n"
                      f"{traceback.format_exc()}").encode("utf-8", "backslashreplace")
    finally:
        _current.instance = outer


def dying(instance, cause: str) -> Optional[str]:
    """The actor dies of cause (PyActor::dying, on the thread that ran the
    endpoint that killed it, in its turn): finish() with what it raised.
    Returns what its __cleanup__ raised, which the cause then includes."""
    error = getattr(_current, "error", None)
    _current.error = None
    if instance is None:  # its __init__ failed: no __cleanup__, but what it spawned stops
        _stop_what_it_spawned()
        return None
    return finish(instance, error if error is not None else RuntimeError(cause))


def _stop_what_it_spawned() -> None:
    """Every mesh the actor this code runs for spawned stops (recursively)."""
    actor = current_actor()
    if actor is not None:
        _supervision.stop_owned(actor[1])


def finish(instance, exc) -> Optional[str]:
    """An actor's last act, once, in its turn: every mesh it spawned stops
    (recursively, so theirs run first), its concurrent tasks are cancelled,
    then its ``__cleanup__(exc)`` (plain or async) runs; exc is None on a stop, the error it died of otherwise.
    A cleanup that raises does not stop the stop: the report of what it
    raised is returned, and the actor dies of it (a supervision event, as in
    Monarch: chained to the failure being handled when it was dying)."""
    if instance.__dict__.get("_crown_finished"):
        return None
    instance.__dict__["_crown_finished"] = True
    _stop_what_it_spawned()
    loop = instance.__dict__.get("_crown_loop_thread")
    if loop is not None:
        loop.cancel_tasks()
    cleanup = getattr(instance, "__cleanup__", None)
    if cleanup is None:
        return None
    outer = current_instance()
    _current.instance = instance
    try:
        result = cleanup(exc)
        if inspect.isawaitable(result):
            _complete(instance, result)
    except BaseException as error:  # noqa: BLE001 - a failing cleanup must not stop the stop
        return (f"__cleanup__ of {type(instance).__qualname__} raised "
                f"{type(error).__qualname__}: {_message_of(error)}\n{traceback.format_exc()}")
    finally:
        _current.instance = outer
    return None


def release(instance) -> None:
    """The actor was stopped (or died): cancel the tasks still running on its
    loop thread and end it, and close its event loop (a selector and two
    sockets)."""
    thread = instance.__dict__.pop("_crown_loop_thread", None)
    loop = instance.__dict__.pop("_crown_loop", None)
    if thread is not None:
        thread.stop()  # the thread closes the loop
    elif loop is not None and not loop.is_running():
        loop.close()


@functools.lru_cache(maxsize=64)
def _combine_function(key: str):
    # Once per function and process, not per hop and message.
    return _pickle.loads(base64.b64decode(key[len(REDUCER_PREFIX):]))


def combine(key: str, a: bytes, b: bytes) -> bytes:
    """Folds two outcomes (VALUE + pickle) with the function key carries;
    RAISED + a text report (utf-8) when it raises."""
    function = None
    try:
        function = _combine_function(key)
        return VALUE + _pickle.dumps(function(_pickle.loads(a[1:]), _pickle.loads(b[1:])))
    except BaseException as error:  # noqa: BLE001 - it fails that member, not the process
        if function is None:
            name = "(which did not unpickle here)"
        else:
            name = getattr(function, "__qualname__", None) or repr(function)
        return RAISED + (f"the Accumulator's combine function {name} raised "
                         f"{type(error).__qualname__} on rank {_crown.rank()}: {error}\n"
                         f"{traceback.format_exc()}").encode("utf-8", "backslashreplace")
