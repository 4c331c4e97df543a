"""tensor_train: the step of examples/python/train_tensor_engine.py (an MLP
Linear(32,64)-ReLU-Linear(64,1), MSE loss, SGD, data-parallel over every
rank, each a quarter of a 4096-sample batch) timed per step, beside the same
model, data and step on the same ranks with torch DistributedDataParallel:
  ddp-gloo     DDP over gloo (TCP loopback), before crown starts (crown
               adopts the MPI that mpi4py began); every rank times STEPS
               steps after WARMUP, the figure is the slowest rank's
  crown        inside procs.activate(): the same step recorded STEPS times,
               gradients averaged with p.grad.reduce_(dims, reduction="avg"),
               then a sync that waits for every engine (to completion)
  controller   the recording alone: the time until the activate() block has
               recorded (and sent) the STEPS steps, before the sync
  no reduce_   crown's step without its four reduce_ calls (each rank keeps
               its own gradients): what the collectives add
  local        plain torch, the step on each rank's shard with no
               communication, every rank at once: the compute
Each figure is the median of ROUNDS rounds of STEPS steps; each rank's CPU
time per step comes beside it (getrusage: every thread, spinning included).
Also the ops per step (the commands every engine ran, and the recorded
commands by kind), and memory over MEMORY_STEPS more steps in one
activate(), sampled five times: the engines' live refs (from sync()) and
every rank's RSS (an actor on every proc reads /proc/self/statm and
ru_maxrss; rank 0 is the controller, which hosts an engine too); once with a
sync every SYNC_EVERY steps, once free-running (the controller records ahead
of the engines, and what is in flight waits in memory). Prints a table with
ratios (ddp time / this time: above 1 means crown is faster) and writes the
results.

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \
    mpirun --oversubscribe -n 4 -x PYTHONPATH /usr/bin/python3 bench/tensor_train.py \
    [results dir or file.json] [steps] [memory steps]
Results: bench/results/tensor_train.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import os
import platform
import statistics
import sys
import time

from mpi4py import MPI  # first: crown adopts this MPI

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
# The example's model, data set and shards (every rank imports it the same way,
# so its remote function resolves there too).
from train_tensor_engine import LR, SAMPLES, model, shard_of, shard_shape  # noqa: E402

from bench_env import allocator, launcher, probe, write_results  # noqa: E402

BENCH = "tensor_train"
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
MEMORY_STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
WARMUP, ROUNDS = 5, 3  # each figure: the median of ROUNDS rounds of STEPS steps
SYNC_EVERY = 10  # the memory loop's first run waits for the engines every SYNC_EVERY steps


def step(net, opt, x, y, average=None):
    """One training step; average(grads) averages the gradients over the
    ranks (crown), or None where DDP's hooks did it inside backward()."""
    loss = torch.nn.functional.mse_loss(net(x), y)
    loss.backward()
    if average is not None:
        average([p.grad for p in net.parameters()])
    opt.step()
    opt.zero_grad()
    return loss


def local_step_s(x, y):
    """The step alone on this rank's shard, no communication: the compute."""
    torch.manual_seed(0)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for _ in range(WARMUP):
        step(net, opt, x, y)
    comm = MPI.COMM_WORLD
    comm.Barrier()  # every rank at once, as in the runs
    cpu, start = probe()[2], time.perf_counter()
    for _ in range(STEPS):
        step(net, opt, x, y)
    elapsed, cpu = (time.perf_counter() - start) / STEPS, (probe()[2] - cpu) / STEPS
    return comm.allreduce(elapsed, op=MPI.MAX), comm.gather(cpu)


# --- the anchor: DistributedDataParallel over gloo, before crown starts -----------------------

def ddp_run():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    comm = MPI.COMM_WORLD
    port = comm.bcast(29500 + os.getpid() % 1000 if comm.rank == 0 else None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    torch.manual_seed(0)
    net = DistributedDataParallel(model())  # broadcasts rank 0's weights
    x, y = shard_of(comm.rank, comm.size)
    local, local_cpu = local_step_s(x, y)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    first = comm.allreduce(float(step(net, opt, x, y)), op=MPI.SUM) / comm.size
    for _ in range(WARMUP - 1):
        step(net, opt, x, y)
    rounds = []
    cpu = probe()[2]
    for _ in range(ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(STEPS):
            loss = step(net, opt, x, y)
        elapsed = (time.perf_counter() - start) / STEPS
        rounds.append(comm.allreduce(elapsed, op=MPI.MAX))  # the slowest rank's
    cpu = comm.gather((probe()[2] - cpu) / (ROUNDS * STEPS))
    last = comm.allreduce(float(loss), op=MPI.SUM) / comm.size
    dist.destroy_process_group()
    return {"rounds_s": rounds, "step_s": statistics.median(rounds), "loss_first": first,
            "loss_last": last, "steps": WARMUP + ROUNDS * STEPS, "cpu_step_s": cpu,
            "local_step_s": local, "local_cpu_step_s": local_cpu}


LOAD_AT_START = os.getloadavg()[0]  # before this run's ranks load the machine themselves
DDP = ddp_run()

import crown  # noqa: E402
from crown import inspect, remote  # noqa: E402
from crown.actor import Actor, endpoint  # noqa: E402


class Probe(Actor):
    @endpoint
    def probe(self):
        return probe()


def commands_run(stats):
    return sum(s["commands"] for s in stats) / len(stats)  # per engine (all run the same)


def main():
    procs = crown.world()
    dims = tuple(procs.sizes)
    parts = len(procs)
    mesh = procs.tensors()
    probes = procs.spawn("probe", Probe)

    def average(grads):
        for g in grads:
            g.reduce_(dims, reduction="avg")

    with procs.activate():
        net = model()
        with torch.no_grad():  # every proc initialised its own: start from their average
            for p in net.parameters():
                p.reduce_(dims, reduction="avg")
        xb, yb = remote(shard_of, propagate=shard_shape)(mesh.rank(dims), parts)
        opt = torch.optim.SGD(net.parameters(), lr=LR)
        first = step(net, opt, xb, yb, average).detach().reduce(dims, reduction="avg")
        for _ in range(WARMUP - 1):
            step(net, opt, xb, yb, average)
    mesh.backend.sync()

    # Recorded commands per step, by kind: a counting wrapper for 10 untimed steps.
    kinds = {"Call": 0, "Reduce": 0, "Delete": 0}
    record = mesh.backend.record

    def counting(command):
        name = type(command).__name__
        kinds[name] = kinds.get(name, 0) + 1
        record(command)

    mesh.backend.record = counting
    with procs.activate():
        for _ in range(10):
            step(net, opt, xb, yb, average)
    del mesh.backend.record
    recorded = {k: n / 10 for k, n in kinds.items()}

    def timed(average):
        """(to completion, controller) seconds per step, medians of ROUNDS; the
        engines' commands per step and each rank's CPU seconds per step."""
        rounds, controller = [], []
        cpu = [p[2] for p in probes.probe.call().get().values()]
        before = mesh.backend.sync()
        for _ in range(ROUNDS):
            start = time.perf_counter()
            with procs.activate():
                for _ in range(STEPS):
                    step(net, opt, xb, yb, average)
            recorded_at = time.perf_counter()
            after = mesh.backend.sync()
            done = time.perf_counter()
            controller.append((recorded_at - start) / STEPS)
            rounds.append((done - start) / STEPS)
        steps = ROUNDS * STEPS
        cpu = [(p[2] - c) / steps for p, c in zip(probes.probe.call().get().values(), cpu)]
        return {"step_s": statistics.median(rounds), "rounds_s": rounds,
                "controller_step_s": statistics.median(controller),
                "controller_rounds_s": controller, "cpu_step_s": cpu,
                "engine_commands_per_step": (commands_run(after) - commands_run(before)) / steps}

    run = timed(average)
    with procs.activate():
        loss = step(net, opt, xb, yb, average)
        last = loss.detach().reduce(dims, reduction="avg")
        curve = (float(inspect(first)), float(inspect(last)))
    del loss, first, last
    # The same step without its four reduce_ calls (each rank keeps its own
    # gradients, so the ranks' weights part): what the collectives add.
    alone = timed(None)

    # Memory over MEMORY_STEPS more steps in one activate(), as the example
    # trains; at each sample the pending commands are sent and run first.
    # First with a sync every SYNC_EVERY steps (the controller at most that
    # far ahead of the engines), then free-running: the controller records
    # ahead of the engines and the commands in flight wait in memory.
    def memory(sync_every):
        samples = []

        def sample(at):
            mesh.flush()
            engines = mesh.backend.sync()
            ranks = probes.probe.call().get().values()
            controller_rss, controller_maxrss, _ = probe()
            samples.append({"step": at, "refs": [e["refs"] for e in engines],
                            "commands": commands_run(engines),
                            "controller_rss": controller_rss,
                            "controller_maxrss": controller_maxrss,
                            "rss": [w[0] for w in ranks], "maxrss": [w[1] for w in ranks]})

        start = time.perf_counter()
        recording = 0.0
        with procs.activate():
            sample(0)
            for at in range(1, MEMORY_STEPS + 1):
                step(net, opt, xb, yb, average)
                if sync_every and at % sync_every == 0:
                    mesh.flush()
                    mesh.backend.sync()
                if at % max(1, MEMORY_STEPS // 4) == 0:
                    recording += time.perf_counter() - start
                    sample(at)
                    start = time.perf_counter()
        return {"sync_every": sync_every, "samples": samples,
                "step_s": recording / MEMORY_STEPS}

    memories = [memory(SYNC_EVERY), memory(None)]

    c, r, d = run["step_s"], run["controller_step_s"], DDP["step_s"]
    ran, cpu = run["engine_commands_per_step"], run["cpu_step_s"]
    local = DDP["local_step_s"]
    mib = 1 << 20
    print(f"{parts} ranks, {SAMPLES} samples ({SAMPLES // parts} per rank), {ROUNDS} rounds of "
          f"{STEPS} steps, medians; torch threads {torch.get_num_threads()}, malloc {allocator()}, "
          f"launcher {launcher()}, "
          f"load {LOAD_AT_START:.2f} at the start, {os.getloadavg()[0]:.2f} now")
    print(f"{'':26} {'ms/step':>9} {'ddp/this':>9}   CPU ms/step by rank")
    print(f"{'ddp-gloo':26} {d * 1e3:9.3f} {1:8.2f}x   "
          + " ".join(f"{v * 1e3:.2f}" for v in DDP["cpu_step_s"]))
    print(f"{'crown (to completion)':26} {c * 1e3:9.3f} {d / c:8.2f}x   "
          + " ".join(f"{v * 1e3:.2f}" for v in cpu) + " (rank 0: controller + engine)")
    print(f"{'crown controller (record)':26} {r * 1e3:9.3f} {d / r:8.2f}x")
    print(f"{'crown, no reduce_':26} {alone['step_s'] * 1e3:9.3f} {d / alone['step_s']:8.2f}x   "
          + " ".join(f"{v * 1e3:.2f}" for v in alone["cpu_step_s"])
          + f" (controller {alone['controller_step_s'] * 1e3:.3f})")
    print(f"{'local step, no comm':26} {local * 1e3:9.3f} {d / local:8.2f}x   "
          + " ".join(f"{v * 1e3:.2f}" for v in DDP["local_cpu_step_s"])
          + " (plain torch, each rank its shard, all at once)")
    print(f"CPU per step, every rank together: ddp-gloo {sum(DDP['cpu_step_s']) * 1e3:.2f} ms, "
          f"crown {sum(cpu) * 1e3:.2f} ms, "
          f"crown no reduce_ {sum(alone['cpu_step_s']) * 1e3:.2f} ms, "
          f"local {sum(DDP['local_cpu_step_s']) * 1e3:.2f} ms ({os.cpu_count()} cores)")
    print(f"ops per step: {ran:.1f} engine commands; recorded "
          + ", ".join(f"{n:.1f} {k}" for k, n in recorded.items())
          + f"; per command: controller {r / ran * 1e6:.1f} us, to completion "
          f"{c / ran * 1e6:.1f} us")
    print(f"loss: crown {curve[0]:.4f} -> {curve[1]:.4f}, ddp {DDP['loss_first']:.4f} -> "
          f"{DDP['loss_last']:.4f} (each from its own initial weights)")
    print(f"memory over {MEMORY_STEPS} more steps in one activate(); RSS by rank, rank 0 the "
          "controller (it hosts an engine too), which keeps the last CROWN_CAST_RESEND_WINDOW "
          f"(now {os.environ.get('CROWN_CAST_RESEND_WINDOW', '256, the default')}) casts, each "
          f"of up to CROWN_TENSOR_BATCH ({os.environ.get('CROWN_TENSOR_BATCH', '256')}) commands:")
    for m in memories:
        how = (f"a sync every {m['sync_every']} steps" if m["sync_every"] else
               "free-running (the controller ahead until the sample's sync)")
        print(f" {how}, {m['step_s'] * 1e3:.2f} ms/step (the samples' time left out):")
        for smp in m["samples"]:
            print(f"  step {smp['step']:5}: {smp['commands']:7.0f} commands so far, engine refs "
                  f"{smp['refs']}, RSS "
                  + " ".join(f"{v / mib:.1f}" for v in smp["rss"]) + " MiB, peak "
                  + " ".join(f"{v / mib:.1f}" for v in smp["maxrss"]) + " MiB")
        first_s, last_s = m["samples"][0], m["samples"][-1]
        print(f"  growth: refs {[y - x for x, y in zip(first_s['refs'], last_s['refs'])]}, RSS "
              + " ".join(f"{(y - x) / mib:+.2f}" for x, y in zip(first_s["rss"], last_s["rss"]))
              + " MiB, peak " + " ".join(f"{(y - x) / mib:+.2f}" for x, y in
                                         zip(first_s["maxrss"], last_s["maxrss"])) + " MiB")

    write_results(BENCH, {"bench": BENCH, "ranks": parts, "host": platform.node(),
                          "allocator": allocator(), "launcher": launcher(),
                          "load_at_start": LOAD_AT_START, "load": os.getloadavg()[0],
                          "torch_threads": torch.get_num_threads(),
                          "samples": SAMPLES, "steps": STEPS, "rounds": ROUNDS,
                          "ddp_gloo": DDP,
                          "crown": dict(run, ddp_over_crown=d / c, recorded_per_step=recorded,
                                        loss_first=curve[0], loss_last=curve[1]),
                          "crown_no_reduce": alone,
                          "memory": {"steps": MEMORY_STEPS, "runs": memories}})


crown.run(main)
