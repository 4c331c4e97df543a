"""The controller's C++ recording path (python/src/tensor_fast_record.cpp):
an op seen before, recorded from __torch_function__ without crown's
Python. It must record exactly what the Python path records, and hand
everything it does not take to it. One process, LocalBackend."""

import numpy as np
import pytest
import torch

from crown import _crown
from crown.tensor import LocalBackend, Mesh, Stream, inspect, _fast_record
from crown.tensor._commands import Call, Delete
from crown.tensor.errors import LocalTensorError

CROWN_RUNTIME = False  # conftest: no MPI bootstrap for this module



def test_it_is_on():
    # CMake runs this file only where crown._aten is built, for this torch.
    assert _fast_record.INSTALLED, "crown._aten not usable here, or CROWN_TENSOR_NATIVE=0"


@pytest.fixture
def python_path():
    _fast_record.uninstall()
    yield
    assert _fast_record.install()


def hits():
    return _crown.tensor_fast_record_hits()


def loop(steps=6):
    """Ops of several shapes of argument (a constant, a tensor twice, a
    keyword, a list), each recorded again after its first time."""
    mesh = Mesh(LocalBackend({"procs": 2}, seed=1), delete_batch=4)
    with mesh.activate():
        z = torch.ones(4, 3)
        w = torch.full((4, 3), 2.0)
        for _ in range(steps):
            z = z * 0.5 + 1
            y = torch.add(z, w, alpha=0.25)
            s = torch.cat([z, y]).sum(dim=0)
            t = (z * z).t()  # a view: strides of its own
            n = z.narrow(0, 1, 2)  # a view at an offset
            u = torch.ones(4, 1, 3) * 2  # a dimension of 1
    commands = [c for c in mesh.backend.pending if type(c) in (Call, Delete)]
    return mesh, commands, [z, y, s, t, n, u]


def test_records_what_the_python_path_records(python_path):
    before = hits()
    _, slow_commands, slow_out = loop()
    assert hits() == before  # the Python path only
    assert _fast_record.install()
    _, fast_commands, fast_out = loop()
    assert hits() - before >= 20  # most of them in C++
    assert len(fast_commands) == len(slow_commands)
    for fast, slow in zip(fast_commands, slow_commands):
        assert type(fast) is type(slow)
        if type(fast) is Call:
            assert (fast.results, fast.blob, fast.inputs, fast.location) == \
                   (slow.results, slow.blob, slow.inputs, slow.location)
        else:
            assert fast.refs == slow.refs
    for a, b in zip(fast_out, slow_out):
        assert (a._ref, a._meta, a._location) == (b._ref, b._meta, b._location)
        assert (a.shape, a.stride(), a.storage_offset(), a.dtype) == \
               (b.shape, b.stride(), b.storage_offset(), b.dtype)
        np.testing.assert_allclose(inspect(a).numpy(), inspect(b).numpy())


def test_the_location_is_the_users_line():
    mesh = Mesh(LocalBackend({"procs": 2}))
    line = test_the_location_is_the_users_line.__code__.co_firstlineno + 7
    with mesh.activate():
        z = torch.ones(3)
        before = hits()
        for _ in range(3):
            z = z * 2
        assert hits() - before == 2
        assert z._location.endswith(f"test_tensor_fast_record.py:{line}")
        assert mesh.backend.pending[-1].location == z._location


def test_a_stream_and_a_switch_of_streams():
    mesh = Mesh(LocalBackend({"procs": 2}))
    side = Stream("side")
    with mesh.activate():
        a = torch.ones(3)
        with side.activate():
            b = torch.ones(3)
            for _ in range(3):
                b = b + 1
            assert b._stream is side
        for _ in range(3):
            a = a + 1  # the first one back on main switches streams
        assert "_stream" not in a.__dict__
    assert inspect(a).tolist() == [4.0] * 3 and inspect(b).tolist() == [4.0] * 3


def test_what_it_does_not_take_goes_the_python_way():
    mesh = Mesh(LocalBackend({"procs": 2}))
    local = torch.ones(3)
    with mesh.activate():
        z = torch.ones(3)
        z = z + 1
        z = z + 1  # learnt: a hit from here on
        before = hits()
        w = torch.ones(3).requires_grad_(True)
        for _ in range(2):
            assert (w + 1).grad_fn is not None  # autograd sees it
        for _ in range(2):
            with pytest.raises(LocalTensorError):
                z + local  # mixed with a local tensor: the Python path's error
        with torch.no_grad():
            for _ in range(2):
                assert (w + 1).grad_fn is None  # no autograd now: hits (learnt from z + 1)
        for _ in range(2):
            z[0:2]  # a slice does not hash: the Python path, every time
        assert hits() - before == 2
    np.testing.assert_allclose(inspect(z).numpy(), [3.0] * 3)


@pytest.mark.parametrize("path", ["c++", "python"])
def test_minus_zero_is_a_constant_of_its_own(path, request):
    if path == "python":
        request.getfixturevalue("python_path")
    mesh = Mesh(LocalBackend({"procs": 2}))
    with mesh.activate():
        z = torch.ones(2)
        for _ in range(2):
            plus, minus = z * 0.0, z * -0.0  # equal as keys of a dict, not as ops
    assert torch.copysign(torch.ones(2), inspect(plus)).tolist() == [1.0, 1.0]
    assert torch.copysign(torch.ones(2), inspect(minus)).tolist() == [-1.0, -1.0]
