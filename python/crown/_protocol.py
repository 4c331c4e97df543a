"""The wire protocol between callers and the actors' dispatcher.

An outcome is a tag byte (VALUE, RAISED, FATAL: defined once, in
python/src/py_actor.h, and read from the extension) and then the pickled
value or the error (raised_body). STOP, FENCE and DIE name the runtime's
own messages to an actor; a call's name is its endpoint's, or (METHOD,
name, explicit_response_port) for as_endpoint(mesh.method), or (RREF, that
name, engine, refs) for rref(); and reducer_key() carries an Accumulator's
combine function to every hop of a cast ("py:<base64 pickle>", the prefix
python/src/bind_reduce.cpp registers, resolved by _runtime.combine).
"""

import base64
import traceback

from . import _crown, _pickle

VALUE = _crown.OUTCOME_VALUE
RAISED = _crown.OUTCOME_RAISED
FATAL = _crown.OUTCOME_FATAL
STOP = "__crown_stop__"  # ActorMesh.stop's first step, in each member's turn
FENCE = "__crown_fence__"  # answered once the actor has handled what came before (ORD-1)
DIE = "__crown_die__"  # a concurrent task's failure, sent to its own actor to kill it
METHOD = "__crown_method__"  # as_endpoint(mesh.method): a method not marked @endpoint
RREF = "__crown_rref__"  # rref(): the results stay on the actor's engine

REDUCER_PREFIX = _crown.REDUCER_PREFIX


def message_of(error: BaseException) -> str:
    """str(error), or what it was when its __str__ raised: the caller still
    gets an ActorError, not crown's bare RemoteActorError."""
    try:
        return str(error)
    except BaseException as failure:  # noqa: BLE001 - any __str__ may raise anything
        return (f"<unprintable {type(error).__qualname__}: its __str__ raised "
                f"{type(failure).__qualname__}>")


def raised_body(error: BaseException, text: str = None) -> bytes:
    """An exception as a caller reads it (after the RAISED tag): pickled
    (the exception itself when it pickles, its type's name, its message, the
    traceback text)."""
    if text is None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        original = _pickle.dumps(error)
    except Exception:  # an exception that does not pickle still reports its text
        original = None
    return _pickle.dumps((original, type(error).__qualname__, message_of(error), text))


def reducer_key(combine) -> str:
    """The reducer key that carries combine to every hop of a cast."""
    return REDUCER_PREFIX + base64.b64encode(_pickle.dumps(combine)).decode("ascii")
