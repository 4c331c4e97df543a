"""python_call_ab: one small Python call_one round trip (64 B), counted or
timed, for an A/B of two builds (each run with its own PYTHONPATH):
  count N  200 warm-up calls, then os.getppid() on both ranks (a marker
           syscall), N round trips, then os.getpgrp() on both. Under
           callgrind --zero-before='*getppid' --dump-before='*getpgrp' the
           first dump of each rank holds those N round trips (the `totals:`
           line); run N and 2N and subtract, so the markers cancel. Under
           strace -f, the syscalls between the two markers are theirs.
  time     500 warm-up calls, 5,000 round trips (p10/p50 us), 4 x 1,000
           pipelined (median calls/s); one JSON line tagged "call_ab".
Run (from the repository root; bench/README.md, issue 9, has the callgrind
and strace lines):
  PYTHONPATH=build/python mpirun --oversubscribe -n 2 -x PYTHONPATH \
    /usr/bin/python3 bench/python_call_ab.py time
"""
import json
import os
import sys
import time

import crown
from crown.actor import Actor, endpoint

PAYLOAD = b"x" * 64


class Echo(Actor):
    @endpoint
    def echo(self, x):
        return x

    @endpoint
    def mark(self, start):
        return os.getppid() if start else os.getpgrp()


def main():
    actor = crown.world_flat().slice(ranks=1).spawn("echo", Echo)
    call = lambda: actor.echo.call_one(PAYLOAD).get()
    if sys.argv[1] == "count":
        n = int(sys.argv[2])
        for _ in range(200):
            call()
        actor.mark.call_one(True).get()
        os.getppid()
        for _ in range(n):
            call()
        os.getpgrp()
        actor.mark.call_one(False).get()
        return
    for _ in range(500):
        call()
    micros = []
    for _ in range(5000):
        start = time.perf_counter()
        call()
        micros.append((time.perf_counter() - start) * 1e6)
    micros.sort()
    rates = []
    for _ in range(4):
        start = time.perf_counter()
        pending = [actor.echo.call_one(PAYLOAD) for _ in range(1000)]
        for f in pending:
            f.get()
        rates.append(1000 / (time.perf_counter() - start))
    print("call_ab " + json.dumps({"p10_us": round(micros[500], 1), "p50_us": round(micros[2500], 1),
                                   "calls_per_s": round(sorted(rates)[2]),
                                   "load": os.getloadavg()[0]}), flush=True)


crown.run(main)
