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

Not yet: ``SlurmJob``, whose hosts outlive the client, needs a client to
attach to a served job (docs/processes.md).
"""

from __future__ import annotations

import os
import pickle
import uuid
from abc import ABC, abstractmethod
from typing import Dict, Optional, Sequence

from ._hosts import HostMesh, launch_hosts

DEFAULT_JOB_PATH = ".crown/job_state.pkl"


class JobState:
    """The host meshes of a running job, by name: ``state.trainers``."""

    def __init__(self, hosts: Dict[str, HostMesh]):
        self._hosts = hosts

    def __getattr__(self, name: str) -> HostMesh:
        hosts = self.__dict__.get("_hosts", {})
        if name in hosts:
            return hosts[name]
        raise AttributeError(f"this job has no host mesh {name!r}; it has {sorted(hosts)}")

    def __repr__(self):
        return f"JobState({self._hosts})"


class JobTrait(ABC):
    """What a job does; a subclass says how (``_create``, ``_state``,
    ``_kill``, ``can_run``). ``apply()`` runs once per job (its
    ``apply_id``); ``kill()`` ends what it made."""

    def __init__(self):
        self._status = "not_running"
        self._apply_id: Optional[str] = None

    def apply(self, client_script: Optional[str] = None) -> None:
        """Gets the job's hosts; a second call does nothing."""
        if self._status == "running":
            return
        if client_script is not None:
            raise ValueError("crown runs the client here: apply() takes no client_script")
        self._create(client_script)
        self._apply_id = uuid.uuid4().hex
        self._status = "running"

    @property
    def apply_id(self) -> Optional[str]:
        return self._apply_id

    @property
    def active(self) -> bool:
        return self._status == "running"

    def state(self, cached_path: Optional[str] = DEFAULT_JOB_PATH) -> JobState:
        """The job's host meshes, applying it first. With cached_path, a job
        cached there that can run this one (``can_run``) is used instead of
        this one, and one that cannot is killed; the job used is cached."""
        job = self
        if cached_path is not None:
            cached = _load_cached(cached_path)
            if cached is not None:
                if cached.can_run(self):
                    job = cached
                else:
                    cached.kill()
        job.apply()
        if cached_path is not None:
            job.dump(cached_path)
        return job._state()

    def kill(self) -> None:
        """Ends what the job made (its procs); its state is gone."""
        self._kill()
        self._status = "not_running"

    def dump(self, filename: str) -> None:
        directory = os.path.dirname(filename)
        if directory:
            os.makedirs(directory, exist_ok=True)
        temporary = f"{filename}.{os.getpid()}.tmp"
        with open(temporary, "wb") as f:
            f.write(self.dumps())
        os.replace(temporary, filename)  # never half a file where a client reads it

    def dumps(self) -> bytes:
        return pickle.dumps(self)

    @abstractmethod
    def _create(self, client_script: Optional[str]) -> None: ...

    @abstractmethod
    def _state(self) -> JobState: ...

    @abstractmethod
    def _kill(self) -> None: ...

    @abstractmethod
    def can_run(self, spec: "JobTrait") -> bool:
        """Whether this job (running) can serve what `spec` asks for."""


def job_loads(data: bytes) -> JobTrait:
    job = pickle.loads(data)
    if not isinstance(job, JobTrait):
        raise TypeError(f"not a crown job: {type(job).__name__}")
    return job


def job_load(filename: str = DEFAULT_JOB_PATH) -> JobTrait:
    with open(filename, "rb") as f:
        return job_loads(f.read())


def _load_cached(path: str) -> Optional[JobTrait]:
    """The job cached at `path`, or None when there is none (or it cannot be
    read: a cache from another version is not worth failing for)."""
    try:
        return job_load(path)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - an unreadable cache is replaced
        return None


# The host meshes of the jobs applied in this process, by apply_id: a job
# loaded from the cache finds the ones its description was applied with
# (they are this process's objects, not part of the description).
_live: Dict[str, Dict[str, HostMesh]] = {}


class _HostJob(JobTrait):
    """A job whose host meshes are made in this process and end with it."""

    def _meshes_here(self) -> Dict[str, HostMesh]:
        meshes = _live.get(self._apply_id)
        if meshes is None:
            meshes = _live[self._apply_id] = self._make()
        return meshes

    def _create(self, client_script: Optional[str]) -> None:
        pass  # its host meshes are made on first use, once apply() has named it

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
