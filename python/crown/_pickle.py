"""Payloads: cloudpickle protocol 5 with out-of-band buffers.

numpy arrays and torch tensors hand their memory to the pickler as buffers
instead of being copied into the pickle string; the payload is a small header,
the pickle, then each buffer once. On loading, the buffers are views into the
received payload (made writable), so a large array is copied once per hop at
most, never pickled byte by byte.
"""

import pickle
import struct

import cloudpickle

_HEADER = struct.Struct("<I")


def dumps(obj) -> bytes:
    """Pickles obj; raises TypeError naming what cannot be pickled."""
    buffers = []
    try:
        # The C pickler first: several times faster than cloudpickle's, and
        # enough for everything importable on every rank (the script's own
        # classes and functions included, since every rank runs the script).
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except Exception:  # a lambda, a class defined in a function: by value
        buffers.clear()
        try:
            data = cloudpickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        except Exception as e:  # pickling errors come in many types
            raise TypeError(f"cannot send {type(obj).__name__}: it cannot be pickled ({e})") from e
    raws = [b.raw() for b in buffers]
    lengths = struct.pack(f"<{len(raws) + 1}Q", len(data), *(r.nbytes for r in raws))
    return b"".join([_HEADER.pack(len(raws)), lengths, data, *raws])


def loads(payload):
    view = memoryview(payload)
    (count,) = _HEADER.unpack_from(view, 0)
    offset = _HEADER.size
    lengths = struct.unpack_from(f"<{count + 1}Q", view, offset)
    offset += 8 * (count + 1)
    if count:
        # Arrays built on these buffers must be writable, as they were.
        view = memoryview(bytearray(view))
    data = view[offset : offset + lengths[0]]
    offset += lengths[0]
    buffers = []
    for length in lengths[1:]:
        buffers.append(view[offset : offset + length])
        offset += length
    try:
        return pickle.loads(data, buffers=buffers)
    except (AttributeError, ImportError) as e:  # sent by reference, missing here
        raise type(e)(f"{e}: it exists where it was sent from, not on this rank. Define it at "
                      "the top level of the script (every rank runs that), or inside the "
                      "controller's main() (then it travels by value)") from e
