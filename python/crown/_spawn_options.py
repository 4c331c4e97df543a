"""How spawn_procs starts its procs, with Monarch's names (issue 46):
BootstrapCommand (the program and environment of each proc),
default_bootstrap_cmd(), and proc_bind (the CPUs each proc may run on).

Each proc's settings travel to it as JSON on its command line
(crown._spawned reads its own by its rank among the procs started together)
and are applied before it imports crown, torch or CUDA; the job's secret is
never among them (SEC-1: it goes over MPI only).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from typing import Callable, Dict, List, Optional, Sequence, Union


@dataclasses.dataclass(frozen=True)
class BootstrapCommand:
    """The program that starts a proc (a Python interpreter) and what it adds
    to the environment that the proc inherits. with_env returns a new one:
    a command given to one spawn_procs call never leaks into later ones."""

    program: str
    env: Dict[str, str] = dataclasses.field(default_factory=dict)

    def with_env(self, env: Dict[str, str]) -> "BootstrapCommand":
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"with_env takes str: str, not {key!r}: {value!r}")
        return dataclasses.replace(self, env={**self.env, **env})


def default_bootstrap_cmd() -> BootstrapCommand:
    """This interpreter, nothing added to the environment."""
    return BootstrapCommand(sys.executable)


_BIND_KEYS = {"cpus", "physcpubind", "cpunodebind"}


def _cpu_list(text: str) -> List[int]:
    """The kernel's list format ("0-3,8") as CPU numbers."""
    cpus: List[int] = []
    for part in str(text).split(","):
        part = part.strip()
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _node_cpus(node: str) -> List[int]:
    path = f"/sys/devices/system/node/node{int(node)}/cpulist"
    try:
        with open(path) as f:
            return _cpu_list(f.read())
    except OSError:
        raise ValueError(f"proc_bind: no NUMA node {node} on this host ({path})") from None


def _cpus_of(binding: Dict[str, str]) -> List[int]:
    unknown = set(binding) - _BIND_KEYS
    if "membind" in unknown:
        raise ValueError("proc_bind: membind is not supported by crown (it binds CPUs: "
                         "cpus, physcpubind or cpunodebind)")
    if unknown:
        raise ValueError(f"proc_bind: unknown keys {sorted(unknown)}; crown takes "
                         f"{sorted(_BIND_KEYS)}")
    cpus: set = set()
    try:
        for key in ("cpus", "physcpubind"):
            if key in binding:
                cpus.update(_cpu_list(binding[key]))
        for node in str(binding.get("cpunodebind", "")).split(","):
            if node.strip():
                cpus.update(_node_cpus(node.strip()))
    except ValueError as e:
        if "proc_bind" in str(e):
            raise
        raise ValueError(f"proc_bind: {binding} is not a CPU list (like '0-3,8'): {e}") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise ValueError(f"proc_bind: {binding} names CPUs {sorted(cpus)}, not a non-empty "
                         f"subset of this host's {sorted(allowed)}")
    return sorted(cpus)


Command = Union[BootstrapCommand, Callable[..., BootstrapCommand], None]


def per_proc(count: int, points: Sequence, command: Command, base: BootstrapCommand,
             proc_bind: Optional[List[Dict[str, str]]]) -> tuple:
    """(program, [settings of each proc]) for `count` procs at `points` and
    `proc_bind` (one each, row-major), checked at once: a binding that names
    no CPU of this host, commands that differ in program, or a program that
    cannot run raise ValueError before any process starts."""
    cpus = [_cpus_of(binding) for binding in proc_bind] if proc_bind is not None else None
    if command is None:
        commands = [base] * count
    elif isinstance(command, BootstrapCommand):
        commands = [command] * count
    elif callable(command):
        commands = [command(point) for point in points]
        for made in commands:
            if not isinstance(made, BootstrapCommand):
                raise TypeError(f"bootstrap_command returned {made!r}, not a BootstrapCommand")
    else:
        raise TypeError(f"bootstrap_command takes a BootstrapCommand or a function of a Point, "
                        f"not {command!r}")
    programs = {made.program for made in commands}
    if len(programs) != 1:
        raise ValueError(f"bootstrap_command: the procs of one spawn_procs start together "
                         f"(one MPI_Comm_spawn), so they run one program, not {sorted(programs)}")
    program = shutil.which(commands[0].program)
    if program is None:
        # Open MPI's runtime waits for good on a program it cannot start.
        raise ValueError(f"spawn_procs: {commands[0].program!r} is not a program this process "
                         f"can run (no such executable file)")
    settings = [{"env": made.env, "cpus": cpus[i] if cpus else None}
                for i, made in enumerate(commands)]
    return program, settings
