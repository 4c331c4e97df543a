"""A client of a served job, run by test_attach.py as `python3
attach_client.py MODE` (started by no launcher): it attaches, does what MODE
says, and prints one JSON line of what it saw."""
import json
import os
import sys
import time

import torch

import crown
from crown.actor import Actor, current_rank, endpoint
from crown.rdma import RDMABuffer


class Counter(Actor):  # in __main__: the job's ranks get it by value
    def __init__(self, start: int):
        self.value = start
        self.data = torch.arange(4, dtype=torch.float32) + 10 * current_rank().rank

    @endpoint
    def incr(self, by: int = 1) -> int:
        self.value += by
        return self.value

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def say(self) -> None:
        print(f"hello from rank {current_rank().rank}", flush=True)

    @endpoint
    def buffer(self) -> RDMABuffer:
        return RDMABuffer(self.data.view(torch.uint8))

    @endpoint
    def read_from(self, buffer: RDMABuffer) -> list:
        out = torch.zeros(16, dtype=torch.uint8)
        buffer.read_into(out).get()
        return out.view(torch.float32).tolist()


def report(**seen) -> None:
    print("RESULT " + json.dumps(seen), flush=True)


def first(attachment) -> None:
    """Spawns on the job's ranks and drives them: call, cast, tensors, RDMA."""
    procs = attachment.host_mesh.spawn_procs(per_host={"gpus": 3})
    counters = procs.spawn("counter", Counter, 10)
    counted = counters.incr.call(5).get()
    counters.say.call().get()  # their lines come to this client's stdout
    pids = sorted(counters.pid.call().get().values())
    with procs.activate():
        total = torch.ones(4).reduce("gpus")
    reduced = crown.inspect(total).tolist()
    buffer = counters.slice(gpus=2).buffer.call_one().get()
    out = torch.zeros(16, dtype=torch.uint8)
    buffer.read_into(out).get()
    mine = torch.tensor([1.5, 2.5, 3.5, 4.5])  # the client's own buffer, read by a rank
    read = counters.slice(gpus=0).read_from.call_one(RDMABuffer(mine.view(torch.uint8))).get()
    report(rank=attachment.rank, counted=sorted(counted.values()), pids=pids, reduced=reduced,
           rdma=out.view(torch.float32).tolist(), read=read, ranks=procs._shape.ranks(),
           kept=sorted(attachment.actor_meshes()))


def main() -> None:
    mode = sys.argv[1]
    if mode == "workers":  # Monarch's way in
        from crown.actor import attach_to_workers

        hosts = attach_to_workers(workers=[os.environ["ATTACH_WORKERS"]],
                                  ca="trust_all_connections")
        counters = hosts.spawn_procs(per_host={"procs": 2}).spawn("counter", Counter, 1)
        report(hosts=hosts.sizes, counted=sorted(counters.incr.call(1).get().values()))
        crown.detach()
        return
    started = time.monotonic()
    try:
        attachment = crown.attach(timeout=30)
    except crown.AttachError as error:
        report(refused=str(error))
        return
    took = time.monotonic() - started
    if mode == "first":
        first(attachment)
    elif mode in ("again", "exit"):
        counters = attachment.actor_mesh("counter")
        report(rank=attachment.rank, counted=sorted(counters.incr.call(1).get().values()),
               kept=sorted(attachment.actor_meshes()), attach_s=took)
    elif mode == "more":  # the job's ranks were handed out by an earlier client
        procs = attachment.host_mesh.spawn_procs(per_host={"procs": 1})
        pid = procs.spawn("extra", Counter, 0).pid.call_one().get()
        ranks = procs._shape.ranks()
        procs.stop()
        report(ranks=ranks, pid=pid)
    elif mode == "hold":
        report(rank=attachment.rank, holding=True)
        time.sleep(600)  # until the test kills this process
    elif mode == "stop":
        counters = attachment.actor_mesh("counter")
        counters.stop()
        report(kept=sorted(attachment.actor_meshes()))
    if mode != "exit":
        attachment.detach()  # "exit": the interpreter's exit detaches


if __name__ == "__main__":
    main()
