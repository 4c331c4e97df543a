"""Jobs with Monarch's names (monarch.job; issue 46, part 3): a job says
what hosts a program needs, ``apply()`` gets them, and ``state()`` gives
them as host meshes by name.

    from crown.job import ProcessJob
    state = ProcessJob({"trainers": 2}).state()   # reuses a cached job
    procs = state.trainers.spawn_procs(per_host={"gpus": 4})

``LocalJob`` is the hosts this program already has: the launch's under
mpirun or srun, this machine otherwise. ``ProcessJob({name: N})`` is N
hosts on this machine per name, whose procs spawn_procs starts (a
controller that no launcher started). A job's description is cached on
disk (``state(cached_path=".crown/job_state.pkl")``): a later client reuses
a cached job that can run what it asks for (``can_run``) and kills one that
cannot. The procs of these jobs are the client's children, so they end with
it; a restarted client applies the cached description again.

``SlurmJob({name: N})`` asks Slurm for N nodes per name (sbatch), runs a
served crown job on them (``crownrun --serve``), and attaches this client
to it (crown.attach): the job outlives the client, and a restarted client
reuses it through the cache and finds its actor meshes.

Batch mode, Monarch's ``apply(client_script="train.py")``: the job runs the
client itself (LocalJob and ProcessJob: a process of its own session here,
its output in ``.crown/logs/job_*/``; SlurmJob: inside the allocation), and
the client's ``state()`` gives the job's hosts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from abc import abstractmethod
from typing import Dict, Optional, Sequence

from ._hosts import HostMesh, launch_hosts
from ._job_trait import (BATCH_JOB_ENV, DEFAULT_JOB_PATH, BatchJob, JobState,  # noqa: F401
                         JobTrait, cache_batch_job, client_command, job_load, job_loads)
from ._slurm_job import SlurmJob  # noqa: F401

__all__ = ["JobTrait", "JobState", "BatchJob", "LocalJob", "ProcessJob", "SlurmJob", "job_load",
           "job_loads", "DEFAULT_JOB_PATH"]

# The host meshes of the jobs applied in this process, by apply_id: a job
# loaded from the cache finds the ones its description was applied with
# (they are this process's objects, not part of the description).
_live: Dict[str, Dict[str, HostMesh]] = {}


class _HostJob(JobTrait):
    """A job whose host meshes are made in this process and end with it."""

    _proc: Optional[subprocess.Popen] = None  # the client it runs (batch mode)
    _log_dir: Optional[str] = None            # where that client's output goes

    def _meshes_here(self) -> Dict[str, HostMesh]:
        meshes = _live.get(self._apply_id)
        if meshes is None:
            meshes = _live[self._apply_id] = self._make()
        return meshes

    def _create(self, client_script: Optional[str]) -> None:
        # Its host meshes are made on first use, once apply() has named it:
        # here, or in the client it runs.
        if client_script is None:
            return
        command = client_command(client_script, sys.executable)
        directory = cache_batch_job(self)
        logs = os.path.join(directory, ".crown", "logs")
        os.makedirs(logs, exist_ok=True)
        self._log_dir = tempfile.mkdtemp(prefix="job_", dir=logs)
        # A client of its own: no launcher's variables (it is no rank of ours).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OMPI_", "PMIX_", "OPAL_", "ORTE_"))}
        env[BATCH_JOB_ENV] = "1"
        with open(os.path.join(self._log_dir, "stdout.log"), "w") as out, \
                open(os.path.join(self._log_dir, "stderr.log"), "w") as err:
            self._proc = subprocess.Popen(command, env=env, stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL, cwd=directory,
                                          start_new_session=True)

    @property
    def process(self) -> subprocess.Popen:
        """The client that apply(client_script) started (Monarch's)."""
        if self._proc is None:
            raise ValueError("this job runs no client: apply(client_script=...) starts one")
        return self._proc

    @property
    def log_dir(self) -> Optional[str]:
        return self._log_dir

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_proc", None)  # a process of this one's, not part of the description
        return state

    def _state(self) -> JobState:
        return JobState(self._meshes_here())

    def _kill(self) -> None:
        for mesh in _live.pop(self._apply_id, {}).values():
            mesh.shutdown()

    @abstractmethod
    def _make(self) -> Dict[str, HostMesh]: ...


class LocalJob(_HostJob):
    """The hosts this program has: under mpirun or srun, every host of the
    launch (``{"hosts": H}``, the launch's ranks on each); otherwise this
    machine as one host, whose procs spawn_procs starts. ``hosts`` names
    the host meshes (each is the same hosts)."""

    def __init__(self, hosts: Sequence[str] = ("hosts",)):
        super().__init__()
        self._names = list(hosts)

    def _make(self) -> Dict[str, HostMesh]:
        from . import _client

        _client.ensure_started()
        if _client.starts_procs():
            return {name: HostMesh(None, 1) for name in self._names}
        return {name: HostMesh(launch_hosts()) for name in self._names}

    def can_run(self, spec: JobTrait) -> bool:
        return isinstance(spec, LocalJob) and spec._names == self._names


class ProcessJob(_HostJob):
    """``ProcessJob({"trainers": 2, "server": 1})``: host meshes of that many
    hosts on this machine, by name, in a controller that no launcher
    started; each host's procs are processes that spawn_procs starts
    (``hosts x per_host`` of them), and kill() ends them all."""

    def __init__(self, hosts: Dict[str, int]):
        super().__init__()
        for name, count in hosts.items():
            if not isinstance(name, str) or not isinstance(count, int) or count < 1:
                raise ValueError(f"ProcessJob({hosts}): each entry is a name and a number of "
                                 f"hosts (at least 1), not {name!r}: {count!r}")
        self._spec = dict(hosts)

    def _make(self) -> Dict[str, HostMesh]:
        from . import _client

        _client.ensure_started()
        if not _client.starts_procs():
            raise ValueError("ProcessJob starts its hosts' procs itself, in a controller that "
                             "no launcher started; under mpirun or srun use LocalJob, whose "
                             "hosts are the launch's")
        return {name: HostMesh(None, count) for name, count in self._spec.items()}

    def can_run(self, spec: JobTrait) -> bool:
        return isinstance(spec, ProcessJob) and spec._spec == self._spec
