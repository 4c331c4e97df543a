"""A Monarch user's first script, as a plain `python3` runs it (issue 46):
an actor class of __main__ (which the spawned procs do not run: it travels
by value), spawn_procs, a call. argv: the file to write the procs' pids to,
then how to end: "exit" (the end of the script) or "sigkill" (the
controller killed; its procs must go with it)."""

import os
import signal
import sys

from crown.actor import Actor, endpoint, this_host


class Counter(Actor):
    def __init__(self):
        self.count = 0

    @endpoint
    def incr(self, by: int) -> int:
        self.count += by
        return self.count

    @endpoint
    def pid(self) -> int:
        return os.getpid()


procs = this_host().spawn_procs(per_host={"gpus": 4})
counters = procs.spawn("counters", Counter)
replies = [counters.slice(gpus=g).incr.call_one(g + 1).get() for g in range(4)]
print("replies", replies, flush=True)
with open(sys.argv[1], "w") as f:
    f.write(" ".join(str(pid) for pid in counters.pid.call().get().values()))
if sys.argv[2] == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
