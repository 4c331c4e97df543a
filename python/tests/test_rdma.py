"""crown.rdma under mpirun -n 3 (issue 12): handles that travel from an
actor to the controller to another actor, reads and writes of torch, numpy
and memoryview memory, RDMAAction batches, every error the issue names, and
lifetime (a buffer nobody keeps lives until dropped; 10,000 register/drop
cycles leave nothing attached and RSS flat; test_rdma_lifetime.py has more).
Run twice by ctest: over the MPI window, and with CROWN_RDMA_WINDOW=0 (the
fabric fallback, which must warn)."""

import gc
import os
import pickle
import time
import warnings

import numpy as np
import pytest
import torch

import crown
from crown import _crown
from crown.actor import Actor, current_rank, endpoint
from crown.rdma import RDMAAction, RDMABuffer, RDMAError, RDMAFallbackWarning
from polling import eventually

EXPECT_WINDOW = os.environ.get("CROWN_RDMA_WINDOW", "1") != "0"


def pattern(n, seed):
    return ((np.arange(n, dtype=np.int64) * 131 + seed) % 251).astype(np.uint8)


class Holder(Actor):
    def __init__(self):
        self.buffers = {}
        self.memory = {}

    @endpoint
    def publish(self, name, n, seed, kind="torch"):
        data = pattern(n, seed)
        if kind == "torch":
            memory = torch.from_numpy(data.copy())
        elif kind == "memoryview":
            memory = memoryview(bytearray(data.tobytes()))
        else:
            memory = data.copy()
        self.memory[name] = memory
        self.buffers[name] = RDMABuffer(memory)
        return self.buffers[name]

    @endpoint
    def read(self, handle, seed):
        into = torch.zeros(handle.size(), dtype=torch.uint8)
        handle.read_into(into).get()
        return bool(np.array_equal(into.numpy(), pattern(handle.size(), seed)))

    @endpoint
    def own(self, name):
        return bytes(np.asarray(self.memory[name]).tobytes())

    @endpoint
    def drop(self, name):
        self.buffers[name].drop().get(timeout=10)

    @endpoint
    def publish_and_forget(self, n):
        return RDMABuffer(torch.ones(n, dtype=torch.uint8))  # nobody keeps it

    @endpoint
    def collect(self):
        gc.collect()

    @endpoint
    def read_ones(self, handle):
        into = torch.zeros(handle.size(), dtype=torch.uint8)
        handle.read_into(into).get()
        return bool((into == 1).all())

    @endpoint
    def stats(self):
        return _crown.rdma_stats()

    @endpoint
    def rank(self):
        return current_rank().rank


@pytest.fixture(scope="module")
def holders():
    return crown.world_flat().spawn("holder", Holder)


def one(holders, rank):
    return holders.slice(ranks=rank)


def test_the_transport_is_the_one_asked_for(holders):
    assert _crown.rdma_stats()["window"] is EXPECT_WINDOW
    assert isinstance(_crown.rdma_stats()["cuda_aware_mpi"], bool)
    assert one(holders, 1).stats.call_one().get(timeout=30)["window"] is EXPECT_WINDOW
    assert crown.rdma.is_rdma_available() is EXPECT_WINDOW
    assert crown.rdma.get_rdma_backend() == ("mpi" if EXPECT_WINDOW else "fabric")
    assert crown.rdma.is_ibverbs_available() is False


def test_a_handle_goes_owner_to_controller_to_reader(holders):
    n = (5 << 20) + 3
    handle = one(holders, 1).publish.call_one("a", n, 7).get(timeout=30)
    assert handle.size() == n and handle.owner.rank == 1 and handle.owner.actor != 0
    assert one(holders, 2).read.call_one(handle, 7).get(timeout=60) is True
    # The controller reads it too, into numpy and into a memoryview.
    array = np.zeros(n, dtype=np.uint8)
    assert handle.read_into(array).get(timeout=30) is None
    assert np.array_equal(array, pattern(n, 7))
    view = memoryview(bytearray(n + 10))
    handle.read_into(view).get(timeout=30)
    assert view[:n].tobytes() == pattern(n, 7).tobytes() and view[n:].tobytes() == b"\0" * 10
    # A handle pickles (this is how it travelled) and reads the same after.
    again = pickle.loads(pickle.dumps(handle))
    assert again.size() == n and again.owner == handle.owner
    assert one(holders, 0).read.call_one(again, 7).get(timeout=60) is True
    # Between ranks of this machine the reader copies the bytes itself.
    assert (_crown.rdma_stats()["single_copy_transfers"] > 0) is EXPECT_WINDOW


def test_write_from_lands_in_the_owner(holders):
    n = 3 << 20
    handle = one(holders, 2).publish.call_one("w", n, 1, "numpy").get(timeout=30)
    src = torch.from_numpy(pattern(n, 42))
    handle.write_from(src).get(timeout=30)
    assert one(holders, 2).own.call_one("w").get(timeout=30) == pattern(n, 42).tobytes()
    handle.write_from(memoryview(b"\x05" * 100)).get(timeout=30)
    assert one(holders, 2).own.call_one("w").get(timeout=30)[:101] == b"\x05" * 100 + bytes(
        pattern(n, 42)[100:101])


def test_an_action_batches_reads_and_writes(holders):
    a = one(holders, 1).publish.call_one("x1", 1 << 20, 3).get(timeout=30)
    b = one(holders, 2).publish.call_one("x2", 1 << 20, 4, "memoryview").get(timeout=30)
    into = np.zeros(1 << 20, dtype=np.uint8)
    action = RDMAAction().read_remote(into, a).write_remote(b, pattern(1 << 20, 9))
    assert action.submit(timeout=30).get(timeout=60) is None
    assert np.array_equal(into, pattern(1 << 20, 3))
    assert one(holders, 2).own.call_one("x2").get(timeout=30) == pattern(1 << 20, 9).tobytes()


def test_size_zero_and_non_contiguous_raise_value_error():
    with pytest.raises(ValueError, match="size 0"):
        RDMABuffer(torch.zeros(0))
    with pytest.raises(ValueError, match="non-contiguous"):
        RDMABuffer(torch.arange(10)[::2])
    with pytest.raises(ValueError, match="1-D"):
        RDMABuffer(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="contiguous"):
        RDMABuffer(np.zeros((4, 4))[:, 0])
    with pytest.raises(ValueError):
        RDMABuffer("not memory")


def test_memory_crown_cannot_reach_raises_value_error(holders):
    # A tensor on a device other than the CPU and CUDA.
    with pytest.raises(ValueError, match="meta"):
        RDMABuffer(torch.empty(16, device="meta"))
    # Memory said to be a CUDA tensor's that CUDA does not know as the
    # device's (here: no GPU, or a build without CUDA) is refused before
    # anything is registered or moved, never handed to MPI.
    host = np.zeros(64, dtype=np.uint8)
    registered = _crown.rdma_stats()["registered"]
    with pytest.raises(ValueError, match="CUDA"):
        _crown.RdmaHandle(host.ctypes.data, 64, False, True)
    assert _crown.rdma_stats()["registered"] == registered
    handle = one(holders, 1).publish.call_one("gpu-guard", 64, 2).get(timeout=30)
    with pytest.raises(ValueError, match="CUDA"):
        handle._handle.read_into(host.ctypes.data, 64, 10.0, True)
    with pytest.raises(ValueError, match="CUDA"):
        handle._handle.write_from(host.ctypes.data, 64, 10.0, True)
    assert not host.any()
    assert isinstance(_crown.rdma_stats()["device_memory"], bool)


def test_a_too_small_destination_raises_before_anything_moves(holders):
    handle = one(holders, 1).publish.call_one("s", 4096, 3).get(timeout=30)
    small = np.full(4095, 0xAB, dtype=np.uint8)
    with pytest.raises(ValueError, match="fewer than"):
        handle.read_into(small)
    assert (small == 0xAB).all()
    with pytest.raises(ValueError, match="more than"):
        handle.write_from(np.zeros(4097, dtype=np.uint8))
    with pytest.raises(ValueError, match="read-only"):
        handle.read_into(memoryview(bytes(4096)))


def test_a_dropped_buffer_fails_clearly(holders):
    handle = one(holders, 1).publish.call_one("d", 1 << 20, 5).get(timeout=30)
    assert one(holders, 2).read.call_one(handle, 5).get(timeout=30) is True  # rank 2 holds a lease
    held = one(holders, 2).stats.call_one().get(timeout=30)["held"]
    one(holders, 1).drop.call_one("d").get(timeout=30)  # revokes it first
    assert one(holders, 2).stats.call_one().get(timeout=30)["held"] == held - 1
    into = np.full(1 << 20, 0x11, dtype=np.uint8)
    with pytest.raises(RDMAError, match="was dropped"):
        handle.read_into(into).get(timeout=30)
    assert (into == 0x11).all()  # never garbage
    with pytest.raises(RDMAError, match="was dropped"):
        handle.write_from(into).get(timeout=30)
    assert one(holders, 1).stats.call_one().get(timeout=30)["in_flight"] == 0


def test_a_buffer_nobody_keeps_lives_until_dropped(holders):
    # Monarch's pattern: the endpoint returns RDMABuffer(t) and keeps nothing;
    # the registration holds t until the buffer is dropped.
    handle = one(holders, 1).publish_and_forget.call_one(1 << 16).get(timeout=30)
    one(holders, 1).collect.call_one().get(timeout=30)
    into = np.full(1 << 16, 7, dtype=np.uint8)
    handle.read_into(into).get(timeout=30)
    assert (into == 1).all()
    assert one(holders, 2).read_ones.call_one(handle).get(timeout=30) is True
    handle.drop().get(timeout=30)  # from the controller, not the owner
    into[:] = 7
    with pytest.raises(RDMAError, match="was dropped"):
        handle.read_into(into).get(timeout=30)
    assert (into == 7).all()


def test_a_buffer_of_a_stopped_actor_is_dropped_with_it():
    mesh = crown.world_flat().spawn("short_lived", Holder)
    handle = mesh.slice(ranks=2).publish.call_one("p", 1 << 16, 2).get(timeout=30)
    before = None if not EXPECT_WINDOW else mesh.slice(ranks=2).stats.call_one().get(timeout=30)
    mesh.stop().get()
    with pytest.raises(RDMAError, match="owner actor stopped"):
        handle.read_into(np.zeros(1 << 16, dtype=np.uint8)).get(timeout=30)
    if before is not None:
        # The stopped actor's region left the window (others' stay).
        other = crown.world_flat().spawn("observer", Holder)
        after = eventually(lambda: other.slice(ranks=2).stats.call_one().get(timeout=30),
                           lambda s: s["attached"] == before["attached"] - 1)
        assert after["attached"] == before["attached"] - 1, (before, after)
        other.stop().get()


def test_a_timeout_raises_timeout_error_and_the_buffer_stays_usable(holders):
    n = 256 << 20
    handle = one(holders, 1).publish.call_one("t", n, 6, "numpy").get(timeout=120)
    into = np.zeros(n, dtype=np.uint8)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        handle.read_into(into, timeout=0.001).get()
    assert time.monotonic() - start < 2
    deadline = time.monotonic() + 30
    while _crown.rdma_stats()["in_flight"]:
        assert time.monotonic() < deadline, "a transfer outlived its timeout"
        time.sleep(0.01)
    handle.read_into(into, timeout=120).get()
    assert np.array_equal(into[::65521], pattern(n, 6)[::65521])
    one(holders, 1).drop.call_one("t").get(timeout=30)


def rss_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_ten_thousand_register_drop_cycles_leave_nothing_behind():
    memory = torch.zeros(1 << 16, dtype=torch.uint8)
    base = _crown.rdma_stats()
    for _ in range(500):  # warm up the allocators before measuring
        RDMABuffer(memory).drop().get(timeout=10)
    rss_before = rss_kib()
    for i in range(10_000):
        RDMABuffer(memory[i % 64:]).drop().get(timeout=10)
    grown = rss_kib() - rss_before
    after = eventually(_crown.rdma_stats, lambda s: s["attached"] == base["attached"])
    assert after["registered"] == base["registered"]
    assert after["attached"] == base["attached"]
    assert after["leases"] == base["leases"] and after["in_flight"] == 0
    assert grown < 4096, f"RSS grew by {grown} KiB over 10,000 cycles"


def test_the_fallback_warns_when_there_is_no_window():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RDMABuffer(torch.zeros(8)).drop().get(timeout=10)
    fallback = [w for w in caught if issubclass(w.category, RDMAFallbackWarning)]
    assert bool(fallback) is not EXPECT_WINDOW
