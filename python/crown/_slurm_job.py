"""SlurmJob (issue 46, part 3; docs/processes.md, "A job on Slurm"): hosts
from Slurm, driven from a client outside the allocation, as Monarch's.

apply() submits one sbatch script for every mesh's nodes. It runs a served
crown job there (``crownrun -n $SLURM_NTASKS --serve``: srun --mpi=pmix),
whose controller listens on TCP (CROWN_DEBUG_TCP) and leaves its token in
a private directory of the user's (CROWN_DEBUG_DIR, under ~/.crown/slurm by
default: the home directory is what login and compute nodes share).
state() waits for Slurm to start the job and for its controller to serve,
attaches this client (crown.attach), and gives the job's hosts by mesh
name, in the order the meshes were named. The job outlives the client: a
restarted client's state() finds it in the cache (``.crown/job_state.pkl``)
and attaches again, finding the actor meshes it left
(crown.attachment().actor_mesh). kill() detaches and cancels the job
(scancel), and returns once Slurm has let it go.

Batch mode, ``apply(client_script="train.py")``: the job runs the client
too, on its first node, beside the served job; the client's state()
attaches to the job it runs in (_job_trait.BatchJob, $SLURM_JOB_ID), and the
allocation ends when the client does, with the client's exit code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

from . import _attach, _console_cli, _jobs
from ._job_trait import (BATCH_JOB_ENV, JobState, JobTrait, cache_batch_job, client_command,
                         in_batch_job)

_TERMINAL = ("FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "COMPLETED", "NODE_FAIL",
             "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY")
# Why a job pends that no wait will change (squeue's %r): it is cancelled
# and said at once rather than waited on for job_start_timeout.
_NEVER = ("PartitionNodeLimit", "PartitionConfig", "PartitionTimeLimit", "BadConstraints",
          "InvalidAccount", "InvalidQOS", "QOSMaxNodePerJobLimit", "QOSMaxCpuPerJobLimit",
          "AssocMaxNodesPerJobLimit", "AssocMaxCpuPerJobLimit")
_POLL_S = 0.5
_KILL_BOUND_S = 120  # after scancel, until Slurm no longer lists the job as running


class SlurmJob(JobTrait):
    """``SlurmJob({"trainers": 2, "server": 1}, ntasks_per_node=4)``: that
    many Slurm nodes per name, with Monarch's arguments. `python_exe` is the
    interpreter of the job's ranks (this one by default); `monarch_port` the
    TCP port its controller takes clients on (0: any free one, which it
    advertises); `job_start_timeout` (seconds, None: no bound) bounds the
    wait for Slurm to start it, after which it is cancelled. crown's own:
    `crownrun` (its path; "crownrun" on PATH, as `module load crown` puts it)
    and `debug_dir` (where the job's token goes; private to the user, on a
    filesystem the client and the job's first node share)."""

    def __init__(self, meshes: Dict[str, int], python_exe: str = sys.executable,
                 slurm_args: Sequence[str] = (), monarch_port: int = 0,
                 job_name: str = "crown_job", ntasks_per_node: int = 1,
                 time_limit: Optional[str] = None, partition: Optional[str] = None,
                 log_dir: Optional[str] = None, exclusive: bool = True,
                 gpus_per_node: Optional[int] = None, cpus_per_task: Optional[int] = None,
                 mem: Optional[str] = None, job_start_timeout: Optional[float] = None,
                 account: Optional[str] = None, qos: Optional[str] = None,
                 crownrun: str = "crownrun", debug_dir: Optional[str] = None):
        super().__init__()
        for name, count in meshes.items():
            if not isinstance(name, str) or not isinstance(count, int) or count < 1:
                raise ValueError(f"SlurmJob({meshes}): each entry is a mesh name and a number of "
                                 f"nodes (at least 1), not {name!r}: {count!r}")
        if not isinstance(ntasks_per_node, int) or ntasks_per_node < 1:
            raise ValueError(f"ntasks_per_node={ntasks_per_node!r}: at least 1 rank per node")
        self._spec = dict(
            meshes=dict(meshes), python_exe=python_exe, slurm_args=list(slurm_args),
            port=int(monarch_port), job_name=job_name, ntasks_per_node=ntasks_per_node,
            time_limit=time_limit, partition=partition, exclusive=exclusive,
            gpus_per_node=gpus_per_node, cpus_per_task=cpus_per_task, mem=mem,
            account=account, qos=qos, crownrun=crownrun)
        self._log_dir = log_dir if log_dir is not None else os.getcwd()
        self._start_timeout = job_start_timeout
        self._debug_dir = debug_dir
        self._made_dir: Optional[str] = None
        self._slurm_job_id: Optional[str] = None
        self._unique_name = ""  # the sbatch job's name, which its output file carries

    # -- Monarch's JobTrait ---------------------------------------------------

    def _create(self, client_script: Optional[str]) -> None:
        spec = self._spec
        crownrun = shutil.which(spec["crownrun"])
        if crownrun is None:
            raise RuntimeError(f"crownrun not found ({spec['crownrun']!r}): `module load crown`, "
                               f"or pass SlurmJob(crownrun=PATH)")
        if self._debug_dir is None:  # one of its own, which kill() removes
            self._made_dir = os.path.join(os.path.expanduser("~"), ".crown", "slurm",
                                          f"{spec['job_name']}-{uuid.uuid4().hex[:8]}")
            self._debug_dir = self._made_dir
        _private_directory(self._debug_dir)
        os.makedirs(self._log_dir, exist_ok=True)
        script = self._script(crownrun)
        if client_script is None:  # (not exec'd: the script's traps outlive it)
            script += f'{_quoted(crownrun)} -n "$SLURM_NTASKS" --serve\n'
        else:  # cached before Slurm can start its client
            command = client_command(client_script, spec["python_exe"])
            script += self._batch_client(crownrun, command, cache_batch_job(self))
        done = subprocess.run(["sbatch", "--parsable"], input=script,
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            self._remove_made_dir()
            raise RuntimeError(f"Slurm refused the job (sbatch exited {done.returncode}): "
                               f"{done.stderr.strip() or done.stdout.strip()}")
        self._slurm_job_id = done.stdout.strip().split(";")[0]

    def served_job(self) -> "_jobs.Job":
        """The served crown job that this Slurm job runs, once it serves
        (applying it first): what ``crown.attach(slurm_job)`` attaches to."""
        self.apply()
        return self._wait_for_service()

    def _state(self) -> JobState:
        job = self._wait_for_service()
        attachment = _attach.attachment()
        if attachment is None:
            attachment = _attach.attach(job)
        elif attachment.job.base != job.base:
            raise RuntimeError(f"this process is attached to another job ({attachment.job.pid}); "
                               f"a process attaches to one job (detach, or use a new process)")
        hosts = attachment.host_mesh
        wanted = sum(self._spec["meshes"].values())
        if hosts.sizes["hosts"] != wanted:
            raise RuntimeError(f"the Slurm job {self._job_id()} has {wanted} nodes, but crown "
                               f"sees {hosts.sizes['hosts']} hosts among its ranks (do its nodes "
                               f"have host names of their own?)")
        meshes, first = {}, 0
        for name, count in self._spec["meshes"].items():
            meshes[name] = hosts.slice(hosts=slice(first, first + count))
            first += count
        return JobState(meshes)

    def _kill(self) -> None:
        attachment = _attach.attachment()
        if attachment is not None and self._debug_dir and attachment.job.base.startswith(
                self._debug_dir + os.sep):
            attachment.detach()
        if self._is_batch_client():
            # The client this job runs: scancel would end the client too, and
            # the allocation ends with it anyway; the served job ends now.
            served = self._served()
            if served is not None:
                _console_cli.stop(served, _KILL_BOUND_S)
            return
        if self._slurm_job_id is None:
            return
        # Never a teardown that says it is done while the job runs on: scancel's
        # failure is raised, and so is a job still listed after the bound.
        cancelled = subprocess.run(["scancel", self._slurm_job_id], capture_output=True,
                                   text=True, timeout=60)
        deadline = time.monotonic() + _KILL_BOUND_S
        while True:
            state, _ = self._slurm_state()
            if state in ("", *_TERMINAL):
                break
            if cancelled.returncode != 0:
                raise RuntimeError(f"scancel {self._slurm_job_id} failed (it is {state}): "
                                   f"{cancelled.stderr.strip()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Slurm job {self._slurm_job_id} is still {state} "
                                   f"{_KILL_BOUND_S} s after scancel")
            time.sleep(_POLL_S)
        self._remove_made_dir()  # what a controller that Slurm killed left (its token, sockets)
        self._slurm_job_id = None

    def can_run(self, spec: JobTrait) -> bool:
        return (isinstance(spec, SlurmJob) and spec._spec == self._spec and
                self._slurm_job_id is not None and
                self._slurm_state()[0] not in ("", *_TERMINAL))

    @property
    def slurm_job_id(self) -> Optional[str]:
        return self._job_id()

    def _job_id(self) -> Optional[str]:
        """The Slurm job's id. The client that a batch job runs holds a copy
        cached before Slurm gave one: its job is the one it runs in. (Never
        stored: a copy cached again there must not cancel that job from
        elsewhere.)"""
        if self._slurm_job_id is None and in_batch_job():
            return os.environ.get("SLURM_JOB_ID")
        return self._slurm_job_id

    def _is_batch_client(self) -> bool:
        """Whether this process is the client that this job runs (batch mode)."""
        return self._slurm_job_id is None and self._job_id() is not None

    def _remove_made_dir(self) -> None:
        """The debug directory apply() made (none was given), gone with the job."""
        if self._made_dir:
            shutil.rmtree(self._made_dir, ignore_errors=True)
            self._debug_dir = self._made_dir = None

    # -- Slurm ----------------------------------------------------------------

    def _script(self, crownrun: str) -> str:
        spec = self._spec
        nodes = sum(spec["meshes"].values())
        unique = self._unique_name = f"{spec['job_name']}_{os.getpid()}"
        lines = ["#!/bin/bash",
                 f"#SBATCH --job-name={unique}",
                 f"#SBATCH --nodes={nodes}",
                 f"#SBATCH --ntasks-per-node={spec['ntasks_per_node']}",
                 f"#SBATCH --output={os.path.join(self._log_dir, f'slurm_%j_{unique}.out')}"]
        options = (("time", spec["time_limit"]), ("gpus-per-node", spec["gpus_per_node"]),
                   ("cpus-per-task", spec["cpus_per_task"]), ("mem", spec["mem"]),
                   ("partition", spec["partition"]), ("account", spec["account"]),
                   ("qos", spec["qos"]))
        lines += [f"#SBATCH --{option}={value}" for option, value in options if value is not None]
        if spec["exclusive"]:
            lines.append("#SBATCH --exclusive")
        lines += [f"#SBATCH {arg}" for arg in spec["slurm_args"] if arg.startswith("-")]
        lines += ["# crown's served job: rank 0 takes clients on TCP, its token in a private "
                  "directory",
                  f"export CROWN_DEBUG_DIR={_quoted(self._debug_dir)}",
                  # (where the client's own environment sets it, as sbatch passes it: its
                  # address on the first node, where the hosts' names do not resolve)
                  f'export CROWN_DEBUG_TCP="${{CROWN_DEBUG_TCP:-:{spec["port"]}}}"',
                  f"export CROWN_PYTHON={_quoted(spec['python_exe'])}"]
        if self._made_dir:
            # Removed however the allocation ends (its script's end, scancel,
            # the time limit: Slurm's SIGTERM to every process of the job,
            # which bash acts on once its command has ended), since no client
            # may be left to do it; a client's kill() removes it too, for a
            # job Slurm SIGKILLed.
            lines += [f"trap {_quoted('rm -rf ' + _quoted(self._made_dir))} EXIT",
                      "trap 'exit 143' TERM"]
        return "\n".join(lines) + "\n"

    def _batch_client(self, crownrun: str, command: List[str], directory: str) -> str:
        """The script's end in batch mode: the served job in the background,
        the client here, then the served job stopped (or, not serving yet,
        ended) and the client's exit code as the job's."""
        lines = [f'{_quoted(crownrun)} -n "$SLURM_NTASKS" --serve &',
                 "served=$!",
                 f"cd {_quoted(directory)}",
                 f"{BATCH_JOB_ENV}=1 {' '.join(_quoted(word) for word in command)}",
                 "status=$?",
                 '"$CROWN_PYTHON" -m crown stop > /dev/null 2>&1 || '
                 'kill -TERM "$served" 2> /dev/null',
                 'wait "$served"',
                 'exit "$status"']
        return "\n".join(lines) + "\n"

    def _slurm_state(self) -> Tuple[str, str]:
        """(state, reason) from squeue; ("", "") once Slurm no longer lists it."""
        done = subprocess.run(["squeue", "-h", "-j", self._job_id(), "-o", "%T|%r"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0 or not done.stdout.strip():
            return "", ""
        state, _, reason = done.stdout.strip().splitlines()[0].partition("|")
        return state, reason

    def _wait_for_service(self) -> "_jobs.Job":
        """The served job, once Slurm runs it and its controller serves;
        cancels it when that does not happen within job_start_timeout."""
        if self._job_id() is None:
            raise RuntimeError("this SlurmJob is not applied (or was killed)")
        started = time.monotonic()
        while True:
            state, reason = self._slurm_state()
            if state in ("", *_TERMINAL):
                raise RuntimeError(f"the Slurm job {self._job_id()} ended "
                                   f"({state or 'no longer in the queue'}) before it served"
                                   f"{self._log_tail()}")
            if state == "RUNNING":
                job = self._served()
                if job is not None:
                    return job
            if state == "PENDING" and reason in _NEVER:
                job_id = self._job_id()
                self._kill()
                raise RuntimeError(f"Slurm will not start the job {job_id} as asked (it pends "
                                   f"with reason {reason}: more nodes, CPUs or time than the "
                                   f"partition allows); it is cancelled")
            waited = time.monotonic() - started
            if self._start_timeout is not None and waited > self._start_timeout:
                job_id = self._job_id()
                self._kill()
                raise TimeoutError(f"the Slurm job {job_id} did not start serving within "
                                   f"job_start_timeout={self._start_timeout} s (it was {state}"
                                   f"{', ' + reason if reason and reason != 'None' else ''}); "
                                   f"it is cancelled")
            time.sleep(_POLL_S)

    def _served(self) -> Optional["_jobs.Job"]:
        """The served job in its debug directory, once its console listens."""
        try:
            running = _jobs.jobs(self._debug_dir)
        except _jobs.CliError:
            return None
        for job in running:
            if os.path.exists(job.base + ".console.tcp"):
                return job
        return None

    def _log_tail(self) -> str:
        path = os.path.join(self._log_dir, f"slurm_{self._job_id()}_{self._unique_name}.out")
        try:
            with open(path) as f:
                return ": its output ends with\n" + "".join(f.readlines()[-10:])
        except OSError:
            return ""


def _private_directory(path: str) -> None:
    """`path` and the directories made for it, this user's alone (0700)."""
    made: List[str] = []
    head = path
    while head and not os.path.exists(head):
        made.append(head)
        head = os.path.dirname(head)
    for directory in reversed(made):
        os.mkdir(directory, 0o700)
    os.chmod(path, 0o700)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
