"""A fault nothing handles ends the job with exit 1 within 1 s, whatever the
controller's main thread is doing (issue 44, defect 2).

As a driver, `fault_ends_job.py CROWNRUN VARIANT` launches itself on 3 ranks
through crownrun, notes when the fault comes (the program says "fault in
0.5 s") and when the job (crownrun, so every rank) has ended, and prints
"job ended X s after the fault, exit code C". The program (`--program
VARIANT`) spawns a mesh on ranks 1 and 2 and has the member on rank 2 raise
0.5 s later under broadcast (nothing supervises it, so the controller's
default hook leaves it unhandled), while main is:

  get      blocked in Future.get() with no timeout
  asyncio  awaiting a crown future in asyncio
  port     blocked in a channel's recv().get() with no timeout (a native port)
  sleep    in time.sleep(30)
  gil      in a C call that holds the GIL and never looks at signals
  two      holding the GIL (0.8 s) while both members die 50 ms apart, then
           blocked in get(): the job ends once, with both reports, in order
  returns  blocked in a get() that a reply ends, with a hook that returns:
           the job goes on, and exits 0
"""
import asyncio
import ctypes
import itertools
import os
import re
import subprocess
import sys
import time

import crown
import crown.actor
from crown.actor import Actor, endpoint


FAULT_AFTER_S = 0.5


class Fragile(Actor):
    @endpoint
    def crack(self):
        raise ValueError("cracked on purpose")

    @endpoint
    def crack_in(self, seconds):
        time.sleep(seconds)
        raise ValueError("cracked on purpose")

    @endpoint
    def nap(self, seconds):
        time.sleep(seconds)
        return "rested"


def program(variant):
    heard = []
    if variant == "returns":
        crown.actor.unhandled_fault_hook = lambda failure: heard.append(failure.rank)

    def main():
        procs = crown.world_flat()
        mesh = procs.slice(ranks=slice(1, 3)).spawn("fragile", Fragile)
        sleeper = procs.slice(ranks=1).spawn("sleeper", Fragile)  # naps beside the cracks
        mesh.nap.call(0).get()  # built and answering
        sleeper.nap.call(0).get()

        # The members break on their own (no thread of the controller's is
        # needed, which the GIL held by main would stop): rank 2's 0.5 s from
        # now; under "two", rank 1's first and rank 2's 50 ms later.
        first = FAULT_AFTER_S
        if variant == "two":
            mesh.slice(ranks=0).crack_in.broadcast(first)  # the member on rank 1
            mesh.slice(ranks=1).crack_in.broadcast(first + 0.05)  # the member on rank 2
        else:
            mesh.slice(ranks=1).crack_in.broadcast(first)
        started = time.monotonic()
        print(f"fault in {first} s", flush=True)
        try:
            if variant == "two":
                # Both faults come while the GIL is held, so that both reports
                # are in before the first can end the job; then main waits.
                ctypes.PyDLL(None).usleep(int((first + 0.3) * 1e6))
                sleeper.nap.call_one(30).get()
            elif variant == "get":
                sleeper.nap.call_one(30).get()
            elif variant == "port":
                _, receiver = crown.actor.Channel.open()
                receiver.recv().get()  # nobody sends
            elif variant == "asyncio":
                async def wait():
                    return await sleeper.nap.call_one(30)

                asyncio.run(wait())
            elif variant == "sleep":
                time.sleep(30)
            elif variant == "gil":
                sum(itertools.repeat(1, 10**13))  # C, the GIL held, no signal checks
            elif variant == "returns":
                print(sleeper.nap.call_one(3).get(), flush=True)
                print(f"the hook heard of ranks {heard}", flush=True)
                print("main done", flush=True)
                return
        except BaseException as error:
            print(f"woke after {time.monotonic() - started - first:.2f} s "
                  f"({type(error).__name__})", flush=True)
            raise
        print("main was never interrupted", flush=True)

    crown.run(main)


def drive(crownrun, variant):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    child = subprocess.Popen(
        [crownrun, "-n", "3", sys.executable, os.path.abspath(__file__), "--program", variant],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    fault_at = None
    reported = []  # the ranks of the unhandled reports, in the order printed
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.startswith("fault in "):
            fault_at = time.monotonic() + float(line.split()[2])
        found = re.search(r"crown: unhandled failure.*the member on rank (\d+)", line)
        if found:
            reported.append(int(found.group(1)))
    code = child.wait()
    ended = time.monotonic()
    if fault_at is None:
        print(f"the program never made its fault; exit code {code}")
    else:
        print(f"job ended {ended - fault_at:.2f} s after the fault, exit code {code}")
    print(f"unhandled reports for ranks {reported}")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--program":
        program(sys.argv[2])
    else:
        sys.exit(drive(sys.argv[1], sys.argv[2]))
