"""The controller's hot recording path in C++ (python/src/tensor_fast_record.cpp
in the _crown extension): an op seen before on mesh tensors, recorded from
__torch_function__ with no Python frame of crown's, about 3 µs less per op
than _op_cache.torch_function, whose hit path it is and to which it hands
everything else. It asks torch two things through crown._aten (grad mode,
requires_grad), so it is on where the engines' native path is:
CROWN_TENSOR_NATIVE=0 turns both off."""

from . import _mesh, _native, _op_cache, _tensor

_PYTHON_PATH = _tensor.Tensor.__dict__["__torch_function__"]


def install() -> bool:
    """Makes the C++ path Tensor.__torch_function__; False where it cannot be."""
    if not _native.ENABLED:
        return False
    import torch

    from .. import _aten, _crown
    from . import _commands, _engine

    _crown.install_native_torch(_aten.api())  # as crown.tensor._worker does: one table
    _crown.configure_tensor_fast_record({
        "tensor": _tensor.Tensor, "torch_tensor": torch.Tensor, "mesh_module": _mesh,
        "main_stream": _mesh.MAIN_STREAM, "tf_cache": _op_cache._tf_cache,
        "slow_path": _op_cache.torch_function, "attribute_read": _op_cache._ATTRIBUTE_READ,
        "internal_prefix": _mesh._INTERNAL,
        "make_wrapper": torch.Tensor._make_wrapper_subclass, "call": _commands.Call,
        "engine_backend": _engine.EngineBackend})
    _tensor.Tensor.__torch_function__ = _crown.tensor_torch_function
    return True


def uninstall() -> None:
    """Back to the Python path (tests compare the two)."""
    _tensor.Tensor.__torch_function__ = _PYTHON_PATH


INSTALLED = install()
