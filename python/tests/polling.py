"""Waiting in tests for something that settles after the call that caused
it has returned (a dropped RDMA region leaves the window on the pool, just
after its drop completes)."""

import time


def eventually(read, settled, seconds=10.0):
    """The first value of read() that settled() accepts, or the last after
    `seconds`."""
    give_up = time.monotonic() + seconds
    value = read()
    while not settled(value) and time.monotonic() < give_up:
        time.sleep(0.002)
        value = read()
    return value
