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
  rows     p50/p99 us of 3,000 round trips each: call_one, call() cast to
           one member, a port round trip (rank 0's channel to the actor's
           and back), and call_one of an explicit_response_port endpoint;
           one JSON line tagged "call_rows" (issue 44's A/B).
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
from crown.actor import Actor, Channel, endpoint

PAYLOAD = b"x" * 64


class Echo(Actor):
    @endpoint
    def echo(self, x):
        return x

    @endpoint(explicit_response_port=True)
    def echo_port(self, port, x):
        port.send(x)

    @endpoint
    def open_channel(self):
        self.inbound, self.receiver = Channel.open()
        return self.inbound

    @endpoint
    def relay(self, out, count):
        for _ in range(count):
            out.send(self.receiver.recv().get())

    @endpoint
    def mark(self, start):
        return os.getppid() if start else os.getpgrp()


def main():
    actor = crown.world_flat().slice(ranks=1).spawn("echo", Echo)
    call = lambda: actor.echo.call_one(PAYLOAD).get()
    if sys.argv[1] == "rows":
        return rows(actor)
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


def percentiles(op, n=3000, warm=300):
    for _ in range(warm):
        op()
    micros = []
    for _ in range(n):
        start = time.perf_counter()
        op()
        micros.append((time.perf_counter() - start) * 1e6)
    micros.sort()
    return round(micros[n // 2], 1), round(micros[n * 99 // 100], 1)


def rows(actor):
    out = {"call_one": percentiles(lambda: actor.echo.call_one(PAYLOAD).get()),
           "cast_call": percentiles(lambda: actor.echo.call(PAYLOAD).get()),
           "ported_call_one": percentiles(lambda: actor.echo_port.call_one(PAYLOAD).get())}
    inbound = actor.open_channel.call_one().get()
    back, receiver = Channel.open()
    relay = actor.relay.call_one(back, 3300)

    def trip():
        inbound.send(PAYLOAD)
        receiver.recv().get()

    out["port_round_trip"] = percentiles(trip)
    relay.get()
    out["load"] = os.getloadavg()[0]
    print("call_rows " + json.dumps(out), flush=True)


crown.run(main)
