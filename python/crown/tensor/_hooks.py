"""The calls from the bottom of crown.tensor's recording layer up into its top.

torch calls into Tensor (_tensor) and into activate()'s dispatch modes
(_mesh), and Mesh.rank() records a tensor; the code they hand the work to
(_op_cache, _record, _fetch) is built on those modules, so they cannot
import it. Each of those modules sets its function here when it is imported
(crown.tensor's __init__ imports them all), and the modules below call it
through here, so that imports go one way.

The recording layer, bottom to top (each module imports only those below):
  _hooks      this module: imports nothing of crown
  _mesh       the recording state (fake mode, activate() stack, current
              stream, suspended), Mesh, the dispatch modes, no_mesh
  _tensor     Tensor, the mesh tensor, and the stream rules (check_use)
  _known      the values the controller knows
  _fetch      collectives (Tensor.reduce) and fetches
  _record     record(): one op recorded the slow way, through FakeTensor
  _op_cache   dispatch() and the fast paths, which replay what record() did
  _fast_record  the fast path in C++, where there is one
_stream, _remote and _engine sit above them.
"""

from typing import Any, Callable


def _not_set(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("crown.tensor's recording layer is not loaded: import crown.tensor")


# _op_cache.dispatch(func, args, kwargs): every aten op on a mesh tensor
# (Tensor.__torch_dispatch__) or inside activate() (the dispatch modes).
dispatch: Callable[[Any, tuple, dict], Any] = _not_set

# _op_cache.torch_function(func, types, args, kwargs): the Python path of
# Tensor.__torch_function__.
torch_function: Callable[[Any, Any, tuple, Any], Any] = _not_set

# _record.record(spec, fake_fn, args, kwargs, ...): records one Call (Mesh.rank()).
record: Callable[..., Any] = _not_set

# _fetch.reduce(t, dims, reduction, scatter, inplace): Tensor.reduce and reduce_.
reduce: Callable[..., Any] = _not_set
