"""What the C++ PyActor calls, on the rank that hosts the actor (with the GIL).

construct() builds the actor from its pickled (class, args, kwargs);
dispatch() runs one pickled endpoint call and returns its pickled outcome: a
tag byte, then the value or the raised exception (as the exception itself when
it pickles, always as its type, message and traceback text). So a Python
exception travels as a value and the caller raises ActorError from it.
"""

import asyncio
import inspect
import threading
import traceback

from . import _pickle

VALUE = b"\x00"
RAISED = b"\x01"

_current = threading.local()  # the actor instance whose endpoint this thread runs


def current_instance():
    return getattr(_current, "instance", None)


def construct(payload: bytes):
    cls, args, kwargs = _pickle.loads(payload)
    _current.instance = None
    return cls(*args, **kwargs)


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


def dispatch(instance, payload: bytes) -> bytes:
    outer = current_instance()
    _current.instance = instance
    try:
        name, args, kwargs = _pickle.loads(payload)
        result = _endpoint_function(type(instance), name)(instance, *args, **kwargs)
        if inspect.isawaitable(result):
            result = _event_loop(instance).run_until_complete(result)
        return VALUE + _pickle.dumps(result)
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        text = traceback.format_exc()
        try:
            original = _pickle.dumps(error)
        except Exception:  # an exception that does not pickle still reports its text
            original = None
        return RAISED + _pickle.dumps((original, type(error).__qualname__, str(error), text))
    finally:
        _current.instance = outer
