"""python_latency: the Python front end's round trip, controller -> an actor in
another process on this machine, beside the same work on two Python systems
measured in the same run:
  crown           Echo actor on rank 1; actor.echo.call_one(payload).get()
  dask            distributed actor (LocalCluster, one worker process, one
                  thread); proxy.echo(payload).result()
  mpi4py_futures  MPIPoolExecutor(max_workers=1), its worker spawned with
                  MPI_Comm_spawn; executor.submit(echo, payload).result()
  mpi4py_futures_world (also shown) the same executor run as documented for
                  launchers: mpirun -n 2 python3 -m mpi4py.futures, the worker
                  being rank 1 of the same MPI_COMM_WORLD
and its anchor, the floor of any Python system here:
  python_tcp      a blocking socket ping-pong (TCP_NODELAY, same payload)
                  between the controller and a thread of rank 1's process
Each gets the same 64-byte payload: round-trip p50/p99 of one call at a time,
then pipelined calls/s (issue 1000 calls, then wait for them all). Dask and
mpi4py run in child processes started by the controller (their own MPI jobs
or process trees, not crown's); crown is measured in two blocks, before and
after them, so a change of machine load shows as two different p50s.
Goal: crown's p50 at most 1/10 of Dask's and at most 1/3 of mpi4py.futures'.

Run (from the repository root):
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \
    mpirun --oversubscribe -n 2 -x PYTHONPATH /usr/bin/python3 bench/python_latency.py \
    [results dir or file.json]
Results: bench/results/python_latency.json (or argv[1], or $CROWN_BENCH_RESULTS).
"""

import gc
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

BENCH = "python_latency"
PAYLOAD_BYTES = 64
WARMUP = 500
ITERATIONS = 5000  # round trips per system; crown's are split over two blocks
PIPELINE_DEPTH = 1000  # calls in flight in one pipelined round
PIPELINE_ROUNDS = 3
CHILD_TIMEOUT_S = 240  # one Dask or mpi4py child, start to finish
RESULT_TAG = "python_latency-result: "  # the line a child's JSON follows

PAYLOAD = b"x" * PAYLOAD_BYTES


# ---------------------------------------------------------------- measuring


def percentile(ordered, q):
    """Nearest rank, as bench_util.h: always one of the measured values."""
    if not ordered:
        return 0.0
    rank = math.ceil(q * len(ordered))
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def summarize(micros):
    ordered = sorted(micros)
    if not ordered:
        return {"samples": 0}
    return {"p50_us": percentile(ordered, 0.50), "p99_us": percentile(ordered, 0.99),
            "mean_us": sum(ordered) / len(ordered), "min_us": ordered[0],
            "max_us": ordered[-1], "samples": len(ordered)}


def round_trips(call, warmup, iterations):
    """Microseconds of `iterations` calls of call(), one at a time."""
    for _ in range(warmup):
        call()
    gc.collect()
    micros = []
    clock = time.perf_counter
    for _ in range(iterations):
        start = clock()
        call()
        micros.append((clock() - start) * 1e6)
    return micros


def pipelined(issue, wait, depth=PIPELINE_DEPTH, rounds=PIPELINE_ROUNDS):
    """calls/s of `rounds` rounds: issue `depth` calls, then wait for all."""
    per_round = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        pending = [issue() for _ in range(depth)]
        for future in pending:
            if wait(future) != PAYLOAD:
                raise RuntimeError("a pipelined reply is not the payload sent")
        per_round.append(depth / (time.perf_counter() - start))
    return {"calls_per_s": sorted(per_round)[len(per_round) // 2],
            "rounds_calls_per_s": per_round, "depth": depth}


def recv_exact(sock, size):
    """Exactly size bytes, or b"" when the peer closed first."""
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return b""
        got += n
    return bytes(data)


def tcp_echo_server():
    """Starts a thread that echoes one connection's PAYLOAD_BYTES messages
    until it closes; returns the port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        with server:
            conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while (data := recv_exact(conn, PAYLOAD_BYTES)):
                conn.sendall(data)

    threading.Thread(target=serve, name="python_latency-tcp-echo", daemon=True).start()
    return server.getsockname()[1]


def system_result(micros, throughput):
    result = summarize(micros)
    result.update(throughput)
    return result


# ---------------------------------------------------------------- Dask (child)


class DaskEcho:
    def echo(self, x):
        return x


def run_dask():
    import logging

    import dask
    import distributed
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                           dashboard_address=None, silence_logs=logging.ERROR)
    try:
        client = Client(cluster)
        try:
            proxy = client.submit(DaskEcho, actor=True).result()
            if proxy.echo(PAYLOAD).result() != PAYLOAD:
                raise RuntimeError("the Dask actor does not echo")
            micros = round_trips(lambda: proxy.echo(PAYLOAD).result(), WARMUP, ITERATIONS)
            throughput = pipelined(lambda: proxy.echo(PAYLOAD), lambda f: f.result())
        finally:
            client.close()
    finally:
        cluster.close()
    result = system_result(micros, throughput)
    result["versions"] = {"dask": dask.__version__, "distributed": distributed.__version__}
    return result


# ------------------------------------------------------- mpi4py.futures (child)


def mpi4py_echo(x):
    return x


def run_mpi4py_futures():
    import mpi4py
    from mpi4py import MPI
    from mpi4py.futures import MPIPoolExecutor
    from mpi4py.futures import _lib

    with MPIPoolExecutor(max_workers=1) as executor:
        if executor.submit(mpi4py_echo, PAYLOAD).result() != PAYLOAD:
            raise RuntimeError("the mpi4py.futures worker does not echo")
        micros = round_trips(lambda: executor.submit(mpi4py_echo, PAYLOAD).result(),
                             WARMUP, ITERATIONS)
        throughput = pipelined(lambda: executor.submit(mpi4py_echo, PAYLOAD),
                               lambda f: f.result())
    result = system_result(micros, throughput)
    result["versions"] = {"mpi4py": mpi4py.__version__,
                          "mpi": MPI.Get_library_version().splitlines()[0].strip().strip("\x00")}
    # Its manager and workers poll with a sleep that doubles up to this bound.
    result["backoff_s"] = float(os.environ.get("MPI4PY_FUTURES_BACKOFF", _lib.BACKOFF))
    return result


def child_main(mode):
    """A helper mode: measure one system, print its JSON on one tagged line."""
    result = run_dask() if mode == "--dask" else run_mpi4py_futures()
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(result), flush=True)


# ------------------------------------------------------- the controller's side


def child_env():
    """This environment without what mpirun gave this rank: a child that keeps
    it would take itself for a rank of crown's job."""
    keep = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}
    return {k: v for k, v in os.environ.items()
            if k in keep or not k.startswith(("OMPI_", "PMIX_", "ORTE_", "OPAL_"))}


def run_child(name, argv):
    """Runs a helper in its own session (so a timeout kills its whole tree);
    returns its result, or {"error": ...}."""
    print(f"  {name}: {' '.join(argv[1:] if argv[0] == sys.executable else argv)}",
          flush=True)
    proc = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return {"error": f"no result within {CHILD_TIMEOUT_S} s", "stderr": err[-2000:]}
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    return {"error": f"exit status {proc.returncode} and no result",
            "stdout": out[-2000:], "stderr": err[-2000:]}


def machine_info():
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "platform": platform.platform(), "cpu": model,
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg_at_start": list(os.getloadavg())}


def results_file():
    where = "bench/results"
    if len(sys.argv) > 1 and sys.argv[1]:
        where = sys.argv[1]
        if where.endswith(".json"):
            return where
    elif os.environ.get("CROWN_BENCH_RESULTS"):
        where = os.environ["CROWN_BENCH_RESULTS"]
    return os.path.join(where, BENCH + ".json")


def ratio(a, b):
    return a / b if b else 0.0


def crown_side():
    """The Echo actor and the measurements that need the crown job."""
    import crown
    from crown import _crown, _pickle, _runtime
    from crown._endpoints import _outcome
    from crown.actor import Actor, Channel, endpoint

    class Echo(Actor):
        @endpoint
        def echo(self, x):
            return x

        @endpoint
        def tcp_echo_server(self):
            return tcp_echo_server()

        @endpoint
        def open_channel(self):
            port, self.receiver = Channel.open()
            return port

        @endpoint
        def relay(self, out, count):
            # A port round trip's far end: each value from its channel to `out`.
            for _ in range(count):
                out.send(self.receiver.recv().get())

        @endpoint
        def stamp(self, x):
            # perf_counter is CLOCK_MONOTONIC: comparable between processes of one host
            return time.perf_counter()

    def main():
        if crown.world_flat().size() < 2:
            raise RuntimeError("run under mpirun -n 2: the actor lives on rank 1")
        info = machine_info()
        procs = crown.world_flat()
        actor = procs.slice(ranks=1).spawn("echo", Echo)
        if actor.echo.call_one(PAYLOAD).get() != PAYLOAD:
            raise RuntimeError("the crown actor does not echo")

        def call():
            return actor.echo.call_one(PAYLOAD).get()

        half = ITERATIONS // 2
        print(f"{BENCH}: controller (rank 0) -> one actor or worker in another process "
              f"on this host; {PAYLOAD_BYTES} B payload, {ITERATIONS} round trips after "
              f"{WARMUP} warm-up, pipelined {PIPELINE_ROUNDS} x {PIPELINE_DEPTH} calls",
              flush=True)
        print("  crown: block 1", flush=True)
        block1 = round_trips(call, WARMUP, half)
        throughput = pipelined(lambda: actor.echo.call_one(PAYLOAD), lambda f: f.get())

        # The anchor: Python to Python over a socket, between the same processes.
        port = actor.tcp_echo_server.call_one().get()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def ping():
                sock.sendall(PAYLOAD)
                if recv_exact(sock, PAYLOAD_BYTES) != PAYLOAD:
                    raise RuntimeError("the TCP echo does not echo")

            tcp = summarize(round_trips(ping, WARMUP, ITERATIONS))

        # Where crown's round trip goes (diagnostics, same actor, same run).
        prepared = _pickle.dumps(("echo", (PAYLOAD,), {}))
        head, buffers = _pickle.dumps_parts(("echo", (PAYLOAD,), {}))
        local = actor._local
        raw = round_trips(lambda: _crown.request(1, local, head, buffers).get(), WARMUP, half)
        outbound, inbound = [], []
        for i in range(WARMUP + half):
            start = time.perf_counter()
            stamped = actor.stamp.call_one(PAYLOAD).get()
            end = time.perf_counter()
            if i >= WARMUP:
                outbound.append((stamped - start) * 1e6)
                inbound.append((end - stamped) * 1e6)
        # A port round trip: rank 0 sends to the actor's channel, the actor
        # sends it on to rank 0's channel (Monarch's Port / PortReceiver).
        inbound_port = actor.open_channel.call_one().get()
        out, receiver = Channel.open()
        relay = actor.relay.call_one(out, WARMUP + half)

        def port_trip():
            inbound_port.send(PAYLOAD)
            receiver.recv().get()

        port_rtt = round_trips(port_trip, WARMUP, half)
        relay.get()
        here = procs.slice(ranks=0).spawn("echo-local", Echo)
        same_process = round_trips(lambda: here.echo.call_one(PAYLOAD).get(), WARMUP, half)
        instance = Echo()
        dispatch = round_trips(lambda: _runtime.dispatch(instance, prepared), WARMUP, half)
        head, buffers = _runtime.dispatch(instance, prepared)
        reply = b"".join([head, *buffers])
        pickling = round_trips(lambda: (_pickle.dumps(("echo", (PAYLOAD,), {})),
                                        _outcome(reply, 1, "echo")), WARMUP, half)

        me = os.path.abspath(__file__)
        dask = run_child("dask", [sys.executable, me, "--dask"])
        spawned = run_child("mpi4py_futures", [sys.executable, me, "--mpi4py-futures"])
        mpirun = shutil.which("mpirun") or "mpirun"
        world = run_child("mpi4py_futures_world",
                          [mpirun, "--oversubscribe", "-n", "2", sys.executable, "-m",
                           "mpi4py.futures", me, "--mpi4py-futures"])

        print("  crown: block 2", flush=True)
        block2 = round_trips(call, WARMUP, ITERATIONS - half)
        info["loadavg_at_end"] = list(os.getloadavg())

        crown_result = system_result(block1 + block2, throughput)
        crown_result["block_p50_us"] = [summarize(block1)["p50_us"],
                                        summarize(block2)["p50_us"]]
        report(info, crown_result, tcp, {"dask": dask, "mpi4py_futures": spawned,
                                    "mpi4py_futures_world": world},
               {"request_prepared_payload": summarize(raw),
                "controller_to_endpoint": summarize(outbound),
                "endpoint_to_controller": summarize(inbound),
                "actor_in_controller_process": summarize(same_process),
                "dispatch_in_process": summarize(dispatch),
                "controller_pickling": summarize(pickling),
                "port_round_trip": summarize(port_rtt)})

    crown.run(main)


def report(info, crown_result, tcp, others, breakdown):
    crown_p50 = crown_result["p50_us"]
    crown_rate = crown_result["calls_per_s"]
    ratios = {"crown_p50_vs_python_tcp": ratio(crown_p50, tcp["p50_us"]),
              "crown_p99_vs_python_tcp": ratio(crown_result["p99_us"], tcp["p99_us"])}
    goals = {}
    for name, other in others.items():
        if "p50_us" in other:
            ratios[f"{name}_p50_vs_crown"] = ratio(other["p50_us"], crown_p50)
            ratios[f"{name}_p99_vs_crown"] = ratio(other["p99_us"], crown_result["p99_us"])
            ratios[f"crown_calls_per_s_vs_{name}"] = ratio(crown_rate, other["calls_per_s"])
    for name, factor in (("dask", 10), ("mpi4py_futures", 3), ("mpi4py_futures_world", 3)):
        if f"{name}_p50_vs_crown" in ratios:
            goals[f"p50_at_most_1/{factor}_of_{name}"] = ratios[f"{name}_p50_vs_crown"] >= factor

    print()
    print(f"{'name':<40} {'p50 us':>10} {'p99 us':>10} {'mean us':>10} {'calls/s':>10} "
          f"{'p50/crown':>10}")

    def row(name, result):
        if "p50_us" not in result:
            print(f"{name:<40} failed: {result.get('error')}")
            return
        rate = f"{result['calls_per_s']:>10.0f}" if "calls_per_s" in result else f"{'-':>10}"
        print(f"{name:<40} {result['p50_us']:>10.1f} {result['p99_us']:>10.1f} "
              f"{result['mean_us']:>10.1f} {rate} "
              f"{ratio(result['p50_us'], crown_p50):>10.2f}")

    row("crown call_one", crown_result)
    row("dask actor", others["dask"])
    row("mpi4py.futures (spawned worker)", others["mpi4py_futures"])
    row("mpi4py.futures (-m mpi4py.futures, n=2)", others["mpi4py_futures_world"])
    row("python tcp ping-pong (anchor)", tcp)
    blocks = crown_result["block_p50_us"]
    print(f"crown p50 by block (before / after the others): {blocks[0]:.1f} / {blocks[1]:.1f} us")
    print("where crown's round trip goes (p50 us):")
    explained = {
        "request_prepared_payload": "request of a pickled call (no pickling on rank 0)",
        "controller_to_endpoint": "rank 0 call_one -> endpoint runs on rank 1",
        "endpoint_to_controller": "endpoint returns on rank 1 -> get() returns",
        "actor_in_controller_process": "call_one to an actor on rank 0 itself",
        "dispatch_in_process": "_runtime.dispatch alone (unpickle, call, pickle)",
        "controller_pickling": "pickle the call + unpickle the reply on rank 0",
        "port_round_trip": "port round trip: rank 0 -> channel on 1 -> channel on 0",
    }
    for key, text in explained.items():
        print(f"  {text:<52} {breakdown[key]['p50_us']:>8.1f}")
    for name, met in goals.items():
        print(f"goal {name}: {'met' if met else 'NOT met'} "
              f"({ratios[name.split('_of_')[1] + '_p50_vs_crown']:.2f}x)")

    results = {
        "bench": BENCH,
        "machine": info,
        "config": {"payload_bytes": PAYLOAD_BYTES, "warmup": WARMUP,
                   "iterations": ITERATIONS, "crown_blocks": 2,
                   "pipeline_depth": PIPELINE_DEPTH, "pipeline_rounds": PIPELINE_ROUNDS,
                   "ranks": 2, "same_host": True,
                   "dask": "LocalCluster(n_workers=1, processes=True, threads_per_worker=1)",
                   "mpi4py_futures": "MPIPoolExecutor(max_workers=1), spawned worker",
                   "mpi4py_futures_world": "mpirun -n 2 python3 -m mpi4py.futures"},
        "metrics": crown_result,
        "anchors": dict(others, python_tcp=tcp),
        "crown_breakdown": breakdown,
        "ratios": ratios,
        "goals": goals,
    }
    path = results_file()
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        json.dump(results, out, indent=2, sort_keys=True)
        out.write("\n")
    print(f"results: {path}", flush=True)
    failed = [name for name, other in others.items() if "p50_us" not in other]
    if failed:
        raise RuntimeError(f"no measurement of {', '.join(failed)} (see {path})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--dask", "--mpi4py-futures"):
        child_main(sys.argv[1])
    else:
        crown_side()
