"""What the Python benchmarks record about the process they ran in."""

import functools
import json
import os
import resource
import sys


@functools.lru_cache(maxsize=None)  # a process's malloc is fixed at its start
def allocator():
    """The malloc this process runs: crownrun preloads tcmalloc (docs/tensors.md)."""
    with open("/proc/self/maps") as maps:
        text = maps.read()
    return next((name for name in ("tcmalloc", "jemalloc", "mimalloc") if f"lib{name}" in text),
                "glibc")


def probe():
    """This process's resident set now, its peak (ru_maxrss, KiB on Linux) and
    the CPU seconds it has used (user + system, every thread)."""
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return resident, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def launcher():
    """How this rank was started: crownrun (which exports CROWN_RESULT_FILE),
    srun (a Slurm step), mpirun, or none (a lone process)."""
    if "CROWN_RESULT_FILE" in os.environ:
        return "crownrun"
    if "SLURM_STEP_ID" in os.environ:
        return "srun"
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_RANK" in os.environ:
        return "mpirun"
    return "none"


def write_results(bench, record):
    """Writes a benchmark's record as JSON to argv[1] (a directory or a .json
    file), else $CROWN_BENCH_RESULTS, else bench/results; says where."""
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "CROWN_BENCH_RESULTS", os.path.join(os.path.dirname(__file__), "results"))
    if not out.endswith(".json"):
        out = os.path.join(out, bench + ".json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"results: {out}")
