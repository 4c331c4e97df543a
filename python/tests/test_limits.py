"""Messages over CROWN_MAX_FRAME_BYTES (set to 1 MiB for this job) under
mpirun -n 2: the sender refuses each at once, with an error naming the size
and the setting, and nothing else is harmed (FLO-1, DLV-1). Before issue 10
the receiver closed the link and the sender took the rank for lost."""

import numpy as np
import pytest

import crown
from crown.actor import Actor, endpoint

LIMIT = 1 << 20


class Store(Actor):
    @endpoint
    def measure(self, array):
        return int(array.nbytes)

    @endpoint
    def make(self, nbytes):
        return np.zeros(nbytes, dtype=np.uint8)


@pytest.fixture(scope="module")
def store():
    return crown.world().slice(procs=1).spawn("store", Store)


def test_a_request_over_the_limit_fails_at_once_and_names_the_setting(store):
    with pytest.raises(ValueError, match="CROWN_MAX_FRAME_BYTES") as raised:
        store.measure.call_one(np.zeros(2 * LIMIT, dtype=np.uint8)).get(timeout=10)
    assert "exceeds the frame limit of 1048576" in str(raised.value)
    assert store.measure.call_one(np.zeros(1000, dtype=np.uint8)).get(timeout=10) == 1000


def test_a_one_way_message_over_the_limit_raises_at_the_sender(store):
    with pytest.raises(ValueError, match="CROWN_MAX_FRAME_BYTES"):
        store.measure.broadcast(np.zeros(2 * LIMIT, dtype=np.uint8))
    assert store.measure.call_one(np.zeros(10, dtype=np.uint8)).get(timeout=10) == 10


def test_a_reply_over_the_limit_fails_that_call_and_the_worker_lives(store):
    with pytest.raises(Exception, match="CROWN_MAX_FRAME_BYTES") as raised:
        store.make.call_one(2 * LIMIT).get(timeout=10)
    assert "reply" in str(raised.value)
    assert store.make.call_one(100).get(timeout=10).nbytes == 100
