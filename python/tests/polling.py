"""Waiting in tests for something that settles after the call that caused
it has returned (a dropped RDMA region leaves the window on the pool, just
after its drop completes; a stopped proc's process ends)."""

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


def running(pid: int) -> bool:
    """A live process, not a zombie waiting for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, its stat is read
        return False


def gone_within(pids, seconds: float) -> list:
    """The pids still running after `seconds` (polled)."""
    return eventually(lambda: [pid for pid in pids if running(pid)], lambda left: not left,
                      seconds)
