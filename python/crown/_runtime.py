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
fails that member. The owner hears through a one-way "__supervise__" call to
its own actor, so supervise() runs in the actor's turn, between messages.

combine() runs an Accumulator's function at a cast-tree hop (reducer keys
"py:<base64 pickle>", resolved in python/src/bind_reduce.cpp).
"""

import asyncio
import base64
import functools
import inspect
import threading
import traceback

from . import _pickle

VALUE = b"\x00"
RAISED = b"\x01"
FATAL = b"\x02"
SUPERVISE = "__supervise__"  # the name a failure report is called under
STOP = "__crown_stop__"  # ActorMesh.stop's first step, in each member's turn

_current = threading.local()  # the actor instance whose endpoint this thread runs


def current_instance():
    return getattr(_current, "instance", None)


class ConstructionError(Exception):
    """An actor's class could not be built here; str() is the Python traceback."""


def construct(payload: bytes):
    _current.instance = None
    try:
        cls, args, kwargs = _pickle.loads(payload)
        return cls(*args, **kwargs)
    except BaseException:  # noqa: BLE001 - reported to the spawner as its traceback
        raise ConstructionError(traceback.format_exc().rstrip()) from None


def _event_loop(instance):
    # One loop per actor runs its async endpoints, one message at a time.
    loop = instance.__dict__.get("_crown_loop")
    if loop is None:
        loop = asyncio.new_event_loop()
        instance.__dict__["_crown_loop"] = loop
    return loop


_endpoints = {}  # (class, name) -> the endpoint's function: found once, not per message


def _endpoint_function(cls, name):
    function = _endpoints.get((cls, name))
    if function is None:
        from .actor import endpoint  # here: actor.py imports this module

        method = inspect.getattr_static(cls, name, None)
        if not isinstance(method, endpoint):
            raise AttributeError(f"{cls.__name__} has no endpoint {name!r}")
        function = _endpoints[(cls, name)] = method.fn
    return function


def dispatch(instance, payload, report: bool = False, parts: bool = False):
    """Runs one pickled call; returns the tag and the pickled outcome as bytes,
    or with `parts` as (head, buffers) for the fabric to send without a copy
    (_pickle.dumps_parts). report: an exception comes back as RAISED + its
    text report (utf-8), not pickled, for the C++ side to throw; a fatal one
    (not an Exception) always comes back so, as FATAL."""
    outcome = _run(instance, payload, report)
    if parts:
        return outcome if isinstance(outcome, tuple) else (outcome, [])
    return outcome if not isinstance(outcome, tuple) else b"".join([outcome[0], *outcome[1]])


def _run(instance, payload, report):
    outer = current_instance()
    _current.instance = instance
    name = None
    try:
        name, args, kwargs = _pickle.loads(payload)
        rref = None
        if type(name) is tuple:  # EndpointRef.rref: keep the result on this rank's engine
            _, name, engine, ref = name
            rref = (engine, ref)
        if name == SUPERVISE:
            result = supervise(instance, *args)
        elif name == STOP:
            result = finish(instance, None)
        else:
            result = _endpoint_function(type(instance), name)(instance, *args, **kwargs)
        if inspect.isawaitable(result):
            result = _event_loop(instance).run_until_complete(result)
        if rref is not None:
            from .tensor._engine import keep_on_engine

            result = keep_on_engine(*rref, result)
        return _pickle.dumps_parts(result, VALUE)
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        _current.error = error  # for dying(), should this failure kill the actor
        text = traceback.format_exc()
        message = _message_of(error)
        if report or not isinstance(error, Exception):
            where = f"endpoint {name!r}" if name is not None else "a call that did not unpickle"
            tag = RAISED if isinstance(error, Exception) else FATAL
            return tag + (f"{where} of {type(instance).__qualname__} raised "
                             f"{type(error).__qualname__}: {message}\n{text}").encode(
                                 "utf-8", "backslashreplace")
        try:
            original = _pickle.dumps(error)
        except Exception:  # an exception that does not pickle still reports its text
            original = None
        return RAISED + _pickle.dumps((original, type(error).__qualname__, message, text))
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
            handled = _event_loop(instance).run_until_complete(handled)
    except Exception as error:
        raise UnhandledFailure(f"{cls}.__supervise__ raised {type(error).__qualname__}: "
                               f"{_message_of(error)}, handling the failure of its mesh "
                               f"'{failure.mesh_name}':\n{failure.report()}") from error
    if not handled:
        raise UnhandledFailure(f"{cls}.__supervise__ did not handle the failure of its mesh "
                               f"'{failure.mesh_name}':\n{failure.report()}")
    return None


def _message_of(error: BaseException) -> str:
    """str(error), or what it was when its __str__ raised: the caller still
    gets an ActorError, not crown's bare RemoteActorError."""
    try:
        return str(error)
    except BaseException as failure:  # noqa: BLE001 - any __str__ may raise anything
        return (f"<unprintable {type(error).__qualname__}: its __str__ raised "
                f"{type(failure).__qualname__}>")


def dying(instance, cause: str) -> None:
    """The actor dies of cause (PyActor::dying, on the thread that ran the
    endpoint that killed it, in its turn): finish() with what it raised."""
    error = getattr(_current, "error", None)
    _current.error = None
    finish(instance, error if error is not None else RuntimeError(cause))


def finish(instance, exc) -> None:
    """An actor's last act, once, in its turn: every mesh it spawned stops
    (recursively, so theirs run first), then its ``__cleanup__(exc)`` (plain
    or async) runs; exc is None on a stop, the error it died of otherwise.
    A cleanup that raises is logged on this rank; the stop goes on."""
    if instance.__dict__.get("_crown_finished"):
        return None
    instance.__dict__["_crown_finished"] = True
    from . import _crown, _supervision

    actor = _crown.current_actor()
    if actor is not None:
        _supervision.stop_owned(actor[1])
    cleanup = getattr(instance, "__cleanup__", None)
    if cleanup is None:
        return None
    outer = current_instance()
    _current.instance = instance
    try:
        result = cleanup(exc)
        if inspect.isawaitable(result):
            _event_loop(instance).run_until_complete(result)
    except BaseException:  # noqa: BLE001 - a failing cleanup must not stop the stop
        _crown.log("error", f"__cleanup__ of {type(instance).__qualname__} raised:\n"
                            f"{traceback.format_exc()}")
    finally:
        _current.instance = outer
    return None


def release(instance) -> None:
    """The actor was stopped: close its event loop (a selector and two sockets)."""
    loop = instance.__dict__.pop("_crown_loop", None)
    if loop is not None and not loop.is_running():
        loop.close()


REDUCER_PREFIX = "py:"


def reducer_key(combine) -> str:
    """The reducer key that carries combine to every hop of a cast."""
    return REDUCER_PREFIX + base64.b64encode(_pickle.dumps(combine)).decode("ascii")


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
        from . import _crown

        if function is None:
            name = "(which did not unpickle here)"
        else:
            name = getattr(function, "__qualname__", None) or repr(function)
        return RAISED + (f"the Accumulator's combine function {name} raised "
                         f"{type(error).__qualname__} on rank {_crown.rank()}: {error}\n"
                         f"{traceback.format_exc()}").encode("utf-8", "backslashreplace")
