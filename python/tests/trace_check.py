"""CROWN_TRACE (issue 15): a real 4-rank mpirun job (trace_job.py) writes one
merged trace; it is valid JSON in the Trace Event Format, with a process
track per rank, events from every rank, the categories crown records
(actor handlers, sends, cast hops, tensor commands, RDMA transfers), and
flows that join: every flow's end has its start, cast hops relay from rank
to rank, and the aligned clocks put no flow's end before its start. Then a
trace path that cannot be written is said, and the job still exits 0.
Run by ctest with PYTHONPATH set; argv[1] is mpirun."""
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable
MPIRUN = sys.argv[1] if len(sys.argv) > 1 else "mpirun"
RANKS = 4


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def run_job(trace_path):
    env = dict(os.environ, CROWN_TRACE=trace_path, CROWN_CAST_FANOUT="1")
    job = subprocess.run([MPIRUN, "--oversubscribe", "-n", str(RANKS), "-x", "PYTHONPATH",
                          "-x", "CROWN_CAST_FANOUT", PYTHON, os.path.join(HERE, "trace_job.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    print(job.stdout + job.stderr, flush=True)
    check(job.returncode == 0, f"the traced job failed ({job.returncode})")
    return job.stdout + job.stderr


def main():
    directory = tempfile.mkdtemp(prefix="crown-trace-test-")
    path = os.path.join(directory, "trace.json")
    # CROWN_TRACE only on rank 0's side of mpirun (no -x): rank 0 decides for all.
    output = run_job(path)
    check(f"crown: wrote the trace of {RANKS} ranks" in output, "the job did not say where")
    with open(path) as f:
        document = json.load(f)
    events = document["traceEvents"]
    check(document["otherData"]["dropped_events"] == 0, document["otherData"])
    for e in events:
        check({"ph", "pid", "name"} <= e.keys(), f"an event lacks ph, pid or name: {e}")
        if e["ph"] != "M":
            check(isinstance(e["ts"], (int, float)) and e["ts"] >= 0, f"bad ts: {e}")
        if e["ph"] == "X":
            check(e["dur"] >= 0, f"a span of negative duration: {e}")
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    check(sorted(names) == list(range(RANKS)), f"process tracks: {names}")
    check(all(names[r].startswith(f"rank {r} (") for r in names), names)
    spans = collections.Counter(e["pid"] for e in events if e["ph"] == "X")
    check(sorted(spans) == list(range(RANKS)), f"spans by rank: {spans}")
    categories = collections.Counter(e.get("cat") for e in events if e["ph"] != "M")
    print("categories:", dict(categories), flush=True)
    for category in ("actor", "send", "cast", "tensor", "rdma"):
        check(categories[category] > 0, f"no {category} events: {dict(categories)}")
    # A Python endpoint's span is named after it, on every rank it ran on.
    squares = {e["pid"] for e in events if e["ph"] == "X" and e["cat"] == "actor"
               and e["name"] == "workers square"}
    check(squares == set(range(RANKS)), f"'workers square' spans on ranks {squares}")
    check(any(e["cat"] == "tensor" and e["name"] == "allreduce" for e in events
              if e["ph"] == "X"), "no allreduce span")
    rdma = [e for e in events if e.get("cat") == "rdma"]
    check(any(e["ph"] == "b" and e["pid"] == 3 for e in rdma)
          and len([e for e in rdma if e["ph"] == "b"]) == len([e for e in rdma if e["ph"] == "e"]),
          f"rdma transfers: {rdma}")

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    check(ends and set(ends) <= set(starts), f"flow ends without a start: {set(ends) - set(starts)}")
    relayed = [(starts[i]["pid"], ends[i]["pid"]) for i in ends]
    check(any(a != 0 and a != b for a, b in relayed), f"no hop relayed a cast: {relayed}")
    check({b for _, b in relayed} >= set(range(1, RANKS)), f"flows reach {relayed}")
    skew = min(ends[i]["ts"] - starts[i]["ts"] for i in ends)
    check(skew >= -100, f"a flow ends {-skew:.0f} us before it starts: clocks not aligned")
    print(f"trace: {len(events)} events from {RANKS} ranks, {len(ends)} flows joined "
          f"(hops {sorted(set(relayed))}), least flow latency {skew:.0f} us", flush=True)

    bad = os.path.join(directory, "no-such-directory", "trace.json")
    output = run_job(bad)
    check("crown: no trace written (CROWN_TRACE=" in output, "an unwritable path was not said")
    check(not os.path.exists(bad), "a trace appeared where it could not")
    print("trace_check: PASS", flush=True)


if __name__ == "__main__":
    main()
