"""Payloads: pickle protocol 5 with out-of-band buffers.

numpy arrays and torch tensors hand their memory to the pickler as buffers
instead of being copied into the pickle string (a CPU tensor travels as the
numpy array that shares its memory, and is rebuilt with torch.from_numpy);
the payload is a small header, the pickle, then each buffer once. A direct
call hands the head and the buffers to the fabric apart (dumps_parts), which
writes each buffer from where it lies; on loading, the buffers are views
into the received payload, writable (crown's received buffers are; others
are copied once), so a large array is never copied by crown on its way.

The C pickler goes first; what it cannot pickle (a lambda, a class defined
inside a function) goes by value through cloudpickle.
"""

import copyreg
import io
import pickle
import struct
import sys
from collections import ChainMap

import cloudpickle

_HEADER = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_PLAIN = struct.Struct("<IQ")  # the header and the pickle's length of a payload without buffers


def _tensor_from_array(array, requires_grad):
    import torch

    tensor = torch.from_numpy(array)
    return tensor.requires_grad_(True) if requires_grad else tensor


def _reduce_tensor(tensor):
    import torch

    if tensor.device.type != "cpu" or tensor.layout != torch.strided or tensor.dtype in (
            torch.bfloat16, torch.complex32) or tensor.is_quantized:
        return tensor.__reduce_ex__(5)  # what numpy cannot hold goes the usual way
    array = tensor.detach().contiguous().numpy()
    return _tensor_from_array, (array, tensor.requires_grad)


_with_tensors = {}  # pickler class -> its subclass that reduces tensors as arrays


def _pickler_class(base):
    # Only once the program has imported torch: never import it to pickle.
    torch = sys.modules.get("torch")
    if torch is None:
        return base
    cls = _with_tensors.get(base)
    if cls is None:
        # A class attribute: the C pickler reads its dispatch table when made.
        table = ChainMap({torch.Tensor: _reduce_tensor},
                         getattr(base, "dispatch_table", copyreg.dispatch_table))
        cls = _with_tensors[base] = type(f"{base.__name__}WithTensors", (base,),
                                         {"dispatch_table": table})
    return cls


def _pickle(base, obj, buffers) -> bytes:
    cls = _pickler_class(base)
    if cls is pickle.Pickler:
        # The module function: no file object and no Pickler made from
        # Python, about 6,000 fewer instructions per pickle (callgrind).
        return pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    out = io.BytesIO()
    cls(out, protocol=5, buffer_callback=buffers.append).dump(obj)
    return out.getvalue()


_main_by_value = False


def main_by_value(on: bool) -> None:
    """In a controller whose procs do not run its script (_client.py), what
    names its ``__main__`` (an actor class of a notebook, a function of the
    script) travels by value, through cloudpickle, rather than by name."""
    global _main_by_value
    _main_by_value = on


def dumps(obj) -> bytes:
    """Pickles obj into one bytes object; raises what pickling raised (dumps_parts)."""
    head, raws = dumps_parts(obj)
    return b"".join([head, *raws])


def dumps_parts(obj, prefix: bytes = b""):
    """Pickles obj as (head, buffers): prefix, the header and the pickle, then
    the out-of-band buffers (memoryviews of the objects' own memory), which
    together are dumps(obj). What cannot be pickled raises its own exception,
    as Monarch lets it (a lock's TypeError, a __getstate__'s RuntimeError):
    callers add a note saying what could not be sent."""
    buffers = []
    try:
        data = _pickle(pickle.Pickler, obj, buffers)
        if _main_by_value and b"__main__" in data:  # names the client's __main__: by value
            raise pickle.PicklingError("__main__ by value")
    except Exception:  # a lambda, a class defined in a function: by value
        buffers.clear()
        data = _pickle(cloudpickle.CloudPickler, obj, buffers)  # its failure is the caller's
    if not buffers:  # a small call: no comprehension, no format string
        return b"".join([prefix, _PLAIN.pack(0, len(data)), data]), []
    raws = [b.raw() for b in buffers]
    lengths = struct.pack(f"<{len(raws) + 1}Q", len(data), *(r.nbytes for r in raws))
    return b"".join([prefix, _HEADER.pack(len(raws)), lengths, data]), raws


def buffer_count(payload) -> int:
    """How many out-of-band buffers a payload carries."""
    return _HEADER.unpack_from(payload, 0)[0]


def loads(payload):
    view = memoryview(payload)
    (count,) = _HEADER.unpack_from(view, 0)
    if not count:  # no out-of-band buffers
        (length,) = _LENGTH.unpack_from(view, _HEADER.size)
        return _unpickle(view[_PLAIN.size : _PLAIN.size + length], ())
    offset = _HEADER.size
    lengths = struct.unpack_from(f"<{count + 1}Q", view, offset)
    offset += 8 * (count + 1)
    if view.readonly:
        # Arrays built on these buffers must be writable, as they were.
        view = memoryview(bytearray(view))
    data = view[offset : offset + lengths[0]]
    offset += lengths[0]
    buffers = []
    for length in lengths[1:]:
        buffers.append(view[offset : offset + length])
        offset += length
    return _unpickle(data, buffers)


def _unpickle(data, buffers):
    try:
        return pickle.loads(data, buffers=buffers)
    except (AttributeError, ImportError) as e:  # sent by reference, missing here
        raise type(e)(f"{e}: it exists where it was sent from, not on this rank. Define it at "
                      "the top level of the script (every rank runs that), or inside the "
                      "controller's main() (then it travels by value)") from e
