"""python_logs: what forwarding the workers' output costs (issue 15), beside
its anchor in the same run. Every worker prints LINES lines with print():
  forwarded  crown's streams: each line to the controller, which merges the
             same line of every worker within the window and prints it
             (timed until the controller has printed all: _logs.flush())
  launcher   the anchor: the same print() to the worker's own stdout, the
             pipe that mpirun reads and forwards (timed on the worker, with
             its flush: mpirun's own delivery is not counted)
Each worker prints the same lines, so the controller prints each once.

Run (from the repository root; the anchor's lines go to mpirun's stdout):
  PYTHONPATH=build/python mpirun --oversubscribe -n 4 -x PYTHONPATH \\
    /usr/bin/python3 bench/python_logs.py > /dev/null
Results: bench/results/python_logs.json (and a summary on stderr).
"""

import json
import os
import statistics
import sys
import tempfile
import time

import crown
from crown import _logs
from crown.actor import Actor, endpoint

LINES = int(os.environ.get("LOG_LINES", "20000"))
ROUNDS = 3


class Printer(Actor):
    @endpoint
    def forwarded(self, lines: int) -> float:
        start = time.perf_counter()
        for i in range(lines):
            print(f"step {i} loss 0.125 lr 3e-4")
        return time.perf_counter() - start

    @endpoint
    def launcher(self, lines: int) -> float:
        stream = sys.stdout
        sys.stdout = _logs._originals[0]  # the launcher's own pipe
        try:
            start = time.perf_counter()
            for i in range(lines):
                print(f"step {i} loss 0.125 lr 3e-4")
            sys.stdout.flush()
            return time.perf_counter() - start
        finally:
            sys.stdout = stream


def main() -> None:
    procs = crown.world_flat()
    workers = procs.slice(ranks=slice(1, procs.size()))
    printers = workers.spawn("printers", Printer)
    results = {"workers": workers.size(), "lines_per_worker": LINES, "rounds": ROUNDS}
    sink = tempfile.TemporaryFile()
    saved = os.dup(1)
    forwarded, launcher, worker_side = [], [], []
    for _ in range(ROUNDS):
        sys.stdout.flush()
        os.dup2(sink.fileno(), 1)  # the controller's terminal: a file, not a flood
        try:
            start = time.perf_counter()
            worker_side.append(max(printers.forwarded.call(LINES).get().values()))
            _logs.flush()
            forwarded.append(time.perf_counter() - start)
        finally:
            os.dup2(saved, 1)
        launcher.append(max(printers.launcher.call(LINES).get().values()))
    sink.seek(0, os.SEEK_END)
    results["controller_bytes_printed"] = sink.tell()
    total = LINES * workers.size()
    for name, values in (("forwarded", forwarded), ("forwarded_worker_side", worker_side),
                         ("launcher", launcher)):
        results[name + "_s"] = values
        results[name + "_lines_per_s_p50"] = total / statistics.median(values)
    ratio = results["forwarded_lines_per_s_p50"] / results["launcher_lines_per_s_p50"]
    results["ratio_forwarded_to_launcher"] = ratio
    print(f"python_logs: {workers.size()} workers x {LINES} lines: forwarded and merged "
          f"{results['forwarded_lines_per_s_p50'] / 1e3:.0f}k lines/s end to end "
          f"(the workers' prints {results['forwarded_worker_side_lines_per_s_p50'] / 1e3:.0f}k), "
          f"launcher's pipe {results['launcher_lines_per_s_p50'] / 1e3:.0f}k lines/s "
          f"(ratio {ratio:.2f})", file=sys.stderr, flush=True)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "python_logs.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    crown.init()
    try:
        main()
    finally:
        crown.shutdown()
