"""The native form of a recorded torch op: what crown._aten (the engines'
"aten" kernel) runs through ATen's dispatcher in C++, with no GIL, instead of
unpickling the op and calling it in Python on every rank.

native(blob) is the op's native form, a NUL and the blob itself (the "aten"
kernel falls back to running the blob in Python where the native path does
not take the op: a GPU shard, an argument type it does not make), or None
for an op that only Python runs: a remote function, or an argument the
native form has no words for (a local tensor's data, a generator, a list of
tensors). The form is JSON: {"op", "overload", "args", "kwargs", "picks"},
with {"input": k} for the Call's input k, {"dtype": "float32"},
{"device": "cpu"}, {"layout": "strided"}, {"memory_format": name}.

CROWN_TENSOR_NATIVE=0 turns it off (every op runs in Python, as before,
and the controller records in Python: _fast_record.py);
so does a torch other than the one crown._aten was built against (a pip
torch in a virtual environment), whose libraries must not meet _aten's.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import warnings
from typing import Dict, Optional

import torch

from ._execute import Input


def _usable() -> bool:
    """Whether crown._aten was built, and for the torch this process runs."""
    try:
        from .. import _aten_torch  # written with _aten, where it is built
    except ImportError:
        return False
    if _aten_torch.matches(torch):
        return True
    warnings.warn(
        f"crown._aten was built for torch {_aten_torch.VERSION} ({_aten_torch.LIBRARY_DIR}), "
        f"and this process runs torch {torch.__version__} ({os.path.dirname(torch.__file__)}): "
        "the engines run torch ops in Python (slower). Use the torch crown was built with, or "
        "rebuild crown with this Python (-DPython3_EXECUTABLE=...)", stacklevel=2)
    return False


USABLE = _usable()  # crown._aten may be loaded here (crown.tensor._worker does)
ENABLED = os.environ.get("CROWN_TENSOR_NATIVE", "1") != "0" and USABLE  # ops sent to it

_LIMIT = 4096  # a loop records a few distinct blobs again and again
_forms: Dict[bytes, Optional[bytes]] = {}


class _NoForm(Exception):
    pass


def _memory_format_name(v: torch.memory_format) -> str:
    return str(v).replace("torch.", "")


def _value(v):
    t = type(v)
    if t is Input:
        return {"input": v.index}
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        if not math.isfinite(v):
            raise _NoForm  # JSON has no inf or nan
        return v
    if t is list or t is tuple:
        return [_value(x) for x in v]
    if t is torch.dtype:
        return {"dtype": str(v).replace("torch.", "")}
    if t is torch.device:
        if v.type != "cpu":
            raise _NoForm
        return {"device": "cpu"}
    if t is torch.layout:
        if v is not torch.strided:
            raise _NoForm
        return {"layout": "strided"}
    if t is torch.memory_format:
        return {"memory_format": _memory_format_name(v)}
    raise _NoForm


def _form(blob: bytes) -> Optional[bytes]:
    spec, args, kwargs, picks = pickle.loads(blob)
    if "::" not in spec:
        return None  # a remote function: Python's
    name, _, overload = spec.partition(".")
    try:
        text = json.dumps({"op": name, "overload": "" if overload == "default" else overload,
                           "args": [_value(a) for a in args],
                           "kwargs": {k: _value(v) for k, v in kwargs.items()},
                           "picks": list(picks)}, separators=(",", ":"))
    except _NoForm:
        return None
    return text.encode() + b"\0" + blob


def native(blob: bytes) -> Optional[bytes]:
    """The blob's native form (see the module's doc), or None."""
    try:
        return _forms[blob]
    except KeyError:
        pass
    form = _form(blob)
    if len(_forms) >= _LIMIT:
        _forms.clear()
    _forms[blob] = form
    return form
