"""Issue 14: an idle job burns no CPU, with more ranks than cores (8 here,
on CI's 2). After a burst of calls, casts and broadcasts has opened the
links, every rank's CPU time (utime + stime, /proc/PID/stat) is read over
5 s in which nothing is sent: each rank may spend a few wake-ups a second
on heartbeats and the rings' read slices, never a spinning core. Run under
each same-host transport (CROWN_SAME_HOST_TRANSPORT, set by CMake)."""

import os
import time

import crown
from crown.actor import Actor, endpoint

IDLE_SECONDS = 5.0
BOUND = 0.02  # of one core, per rank: 20 ms of CPU in 1 s (measured: well under 1 %)


class Sleeper(Actor):
    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def note(self, n):
        self.last = n


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def test_idle_ranks_burn_no_cpu():
    procs = crown.world()
    sleepers = procs.spawn("sleepers", Sleeper)
    pids = sleepers.pid.call().get(timeout=30).values()
    for n in range(200):  # a burst, so that links and threads exist, then nothing
        sleepers.note.broadcast(n)
        sleepers.slice(procs=n % len(pids)).pid.call_one().get(timeout=30)
    sleepers.pid.call().get(timeout=30)
    time.sleep(0.5)  # the rings' spins after the burst end
    before = {pid: cpu_seconds(pid) for pid in pids}
    start = time.monotonic()
    time.sleep(IDLE_SECONDS)
    elapsed = time.monotonic() - start
    used = {pid: (cpu_seconds(pid) - before[pid]) / elapsed for pid in pids}
    print("\nidle CPU per rank (fraction of a core): " +
          " ".join(f"{fraction:.4f}" for fraction in used.values()))
    busy = {pid: fraction for pid, fraction in used.items() if fraction > BOUND}
    assert not busy, f"ranks busy while idle (pid: fraction of a core): {busy}"
    sleepers.pid.call().get(timeout=30)  # and still answering


if __name__ == "__main__":
    crown.run(test_idle_ranks_burn_no_cpu)
