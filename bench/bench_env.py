"""What the Python benchmarks record about the process they ran in."""

import functools


@functools.lru_cache(maxsize=None)  # a process's malloc is fixed at its start
def allocator():
    """The malloc this process runs: crownrun preloads tcmalloc (docs/tensors.md)."""
    with open("/proc/self/maps") as maps:
        text = maps.read()
    return next((name for name in ("tcmalloc", "jemalloc", "mimalloc") if f"lib{name}" in text),
                "glibc")
