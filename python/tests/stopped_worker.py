"""SHT-1 for a rank that the controller takes for lost (issue 10): rank 2 is
stopped (SIGSTOP) past the heartbeat bound, so the controller gives it up,
and it is continued only after the controller's program has ended. It must
still exit, soon: the job ends and no process is left behind (the CMake test
checks with pgrep). Run with recovery on and a 1 s heartbeat bound."""

import os
import signal
import subprocess
import time

import crown
import print_faults
from crown.actor import Actor, SupervisionError, endpoint


class Pid(Actor):
    @endpoint
    def pid(self):
        return os.getpid()


def main():
    print_faults.install()
    victim = crown.world_flat().slice(ranks=2).spawn("pid", Pid)
    pid = victim.pid.call_one().get(timeout=10)
    os.kill(pid, signal.SIGSTOP)
    time.sleep(3)
    try:
        victim.pid.call_one().get(timeout=10)
        raise AssertionError("a stopped rank answered")
    except SupervisionError as lost:
        print("rank 2 taken for lost:", lost, flush=True)
    # Continued 3 s after this program returns, when no Shutdown will come.
    subprocess.Popen(["sh", "-c", f"sleep 3; kill -CONT {pid}"], start_new_session=True)
    print("controller done", flush=True)


crown.run(main)
