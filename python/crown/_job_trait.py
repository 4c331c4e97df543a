"""The job interface with Monarch's names (monarch.job; issue 46, part 3):
JobTrait, JobState, loading a job's cached description, and batch mode
(``apply(client_script=...)``: the job runs its own client, which finds the
job it runs in through BatchJob). crown.job has the jobs themselves
(LocalJob, ProcessJob, SlurmJob)."""

from __future__ import annotations

import os
import pickle
import shlex
import uuid
from abc import ABC, abstractmethod
from typing import Dict, List, Optional

from ._hosts import HostMesh

DEFAULT_JOB_PATH = ".crown/job_state.pkl"
# Set in the client that a job runs itself (batch mode): its state() takes
# the job it runs in from the cache instead of applying a new one.
BATCH_JOB_ENV = "CROWN_BATCH_JOB"


def in_batch_job() -> bool:
    """Whether this process is the client that a job runs (batch mode)."""
    return os.environ.get(BATCH_JOB_ENV) == "1"


def client_command(client_script: str, python: str) -> List[str]:
    """The command of a batch client: `client_script` is a command line, or
    a Python script (its first word ends in .py) that `python` runs."""
    words = shlex.split(client_script)
    if not words:
        raise ValueError("client_script is empty: give a script (train.py) or a command line")
    return [python, *words] if words[0].endswith(".py") else words


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
        """Gets the job's hosts; a second call does nothing. With
        `client_script` (batch mode) the job also runs that client, whose
        ``state()`` gives this job's hosts: it is cached (DEFAULT_JOB_PATH,
        in this directory, where the client starts) as a BatchJob."""
        if self._status == "running":
            return
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


class BatchJob(JobTrait):
    """A job that runs its own client (batch mode), as apply(client_script)
    caches it before the client starts. In that client (CROWN_BATCH_JOB=1)
    it can run any spec: ``state()`` there gives the hosts of the job the
    client runs in. Anywhere else it can run nothing, so a later state()
    replaces it."""

    def __init__(self, job: JobTrait):
        super().__init__()
        self._job = job
        self._status = "running"
        self._apply_id = job.apply_id or uuid.uuid4().hex

    def can_run(self, spec: JobTrait) -> bool:
        return in_batch_job()

    def _create(self, client_script: Optional[str]) -> None:
        raise RuntimeError("a BatchJob is running already: its job was applied by its submitter")

    def _state(self) -> JobState:
        return self._job._state()

    def _kill(self) -> None:
        self._job._kill()


def cache_batch_job(job: JobTrait) -> str:
    """Caches `job` as the BatchJob that its client will find; returns the
    directory the client must start in (where the cache's path is)."""
    BatchJob(job).dump(os.path.abspath(DEFAULT_JOB_PATH))
    return os.getcwd()


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
