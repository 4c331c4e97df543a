"""The program that bench/python_start.py starts (issue 46): a Monarch
user's first script, run either as a plain ``python3`` (no launcher: it
becomes the controller and spawn_procs starts PROCS new processes) or under
``mpirun -n PROCS`` (crown.run(main) over crown.world()). Either way it
spawns one actor per proc and waits for every member's first reply.

It prints one line, ``python_start: {...}``, of wall-clock marks
(time.time(), which the driver compares with its own before it started
this process):
  begin    the first line of this file runs (the interpreter is up)
  imported crown and crown.actor imported
  init     plain: this_host() made this process the controller (a singleton's
           MPI_Init, crown's bootstrap); mpirun: main() runs (every rank's
           bootstrap done)
  joined   plain only: spawn_procs returned (one MPI_Comm_spawn, every
           proc's interpreter, its import of crown, its join)
  replied  an actor spawned on every proc and call().get() back from all
  first_started, last_started  when the members' processes started (from
           /proc, 10 ms steps; under mpirun rank 0 is one of them)
Environment: PYTHON_START_PROCS (plain: how many procs; default 4).
"""

import time

BEGIN = time.time()

import json  # noqa: E402 - after the first mark
import os  # noqa: E402
import sys  # noqa: E402

import crown  # noqa: E402
from crown.actor import Actor, endpoint, this_host  # noqa: E402

IMPORTED = time.time()


def process_started() -> float:
    """When this process started, on the wall clock: /proc's start time (in
    clock ticks since boot) turned into time.time()'s scale (10 ms steps)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - since


class Member(Actor):
    @endpoint
    def started(self) -> tuple:
        return os.getpid(), process_started()


def report(marks: dict, replies: dict) -> None:
    starts = [started for _, started in replies.values()]
    marks.update(begin=BEGIN, imported=IMPORTED, members=len({pid for pid, _ in replies.values()}),
                 first_started=min(starts), last_started=max(starts))
    print("python_start: " + json.dumps(marks), flush=True)


def under_launcher() -> None:
    init = time.time()
    replies = crown.world().spawn("members", Member).started.call().get()
    replied = time.time()
    report({"init": init, "replied": replied}, replies)


if "OMPI_COMM_WORLD_SIZE" in os.environ:
    crown.run(under_launcher)
else:
    count = int(os.environ.get("PYTHON_START_PROCS", "4"))
    host = this_host()  # this process becomes the controller here
    init = time.time()
    procs = host.spawn_procs(per_host={"gpus": count})
    joined = time.time()
    replies = procs.spawn("members", Member).started.call().get()
    replied = time.time()
    report({"init": init, "joined": joined, "replied": replied}, replies)
    sys.stdout.flush()
