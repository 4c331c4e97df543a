"""spawn_procs under mpirun -n 4 (issue 46): each call hands out launch
ranks that no earlier call took (LocalJob's host mesh has a "hosts"
dimension, this_host()'s procs none); once they are spent, new processes
start (mpirun can); procs() shares the launch's first ranks; a started
mesh's stop() ends its processes."""

import os

import crown
from crown.actor import Actor, endpoint, this_host
from crown.job import LocalJob
from polling import gone_within


class Pid(Actor):
    @endpoint
    def pid(self) -> int:
        return os.getpid()


def main():
    hosts = LocalJob().state(cached_path=None).hosts
    first = hosts.spawn_procs(per_host={"gpus": 2})
    print("first:", first.sizes, first._shape.ranks())
    second = hosts.spawn_procs(per_host={"gpus": 1})
    print("second:", second.sizes, second._shape.ranks())
    last = this_host().spawn_procs()
    print("last:", last.sizes, last._shape.ranks())
    started = this_host().spawn_procs(per_host={"gpus": 2})
    pids = list(started.spawn("pids", Pid).pid.call().get().values())
    launch = list(crown.world().spawn("pids", Pid).pid.call().get().values())
    print("started:", started.sizes, started._shape.ranks()[0] >= 4,
          "new processes:", not set(pids) & set(launch))
    print("shared:", hosts.procs(per_host={"gpus": 2})._shape.ranks())
    started.stop()
    print("ended:", gone_within(pids, 5) == [])


crown.run(main)
