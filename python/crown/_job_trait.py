"""The job interface with Monarch's names (monarch.job; issue 46, part 3):
JobTrait, JobState, and loading a job's cached description. crown.job has
the jobs themselves (LocalJob, ProcessJob, SlurmJob)."""

from __future__ import annotations

import os
import pickle
import uuid
from abc import ABC, abstractmethod
from typing import Dict, Optional

from ._hosts import HostMesh

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
