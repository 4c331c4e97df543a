"""Monarch's workers and attach_to_workers, over crown's served jobs (issue
46; docs/processes.md, "Attaching to a served job").

In Monarch each host runs ``run_worker_loop_forever(address=..., ca=...)``
and a client calls ``attach_to_workers(workers=[...])``. In crown the
workers are the ranks of one launch: every rank calls
run_worker_loop_forever (mpirun or srun starts them, as for any crown
program), which serves as ``crownrun --serve`` does, rank 0 listening for
clients at `address`; attach_to_workers attaches to that served job
(crown.attach) and gives its hosts as a HostMesh of ``{"hosts":
len(workers)}``.

Monarch's ``ca="trust_all_connections"`` admits whoever reaches the port.
crown does not: whatever `ca` says, a client must prove the job's token,
which only the job's user can read (its private CROWN_DEBUG_DIR), and the
fabric secret never crosses the client's connection in the clear.
"""

from __future__ import annotations

import os
import re
from typing import List, Optional

from . import _attach, _client, _console, _jobs

_ADDRESS = re.compile(r"^tcp://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


def _parsed(address: str):
    match = _ADDRESS.match(address.strip())
    if not match or int(match["port"]) > 65535:
        raise ValueError(f"{address!r}: crown's workers listen on TCP, as tcp://HOST:PORT "
                         f"(HOST * for every interface)")
    host = match["host"].strip("[]")
    return ("" if host in ("*", "0.0.0.0") else host), int(match["port"])


def run_worker_loop_forever(*, address: str, ca: Optional[str] = None,
                            private_key=None) -> None:
    """Serves on every rank of this launch until ``crown stop`` (or a
    client's job kill), then exits the process; rank 0 takes clients at
    `address` (tcp://HOST:PORT). `ca` and `private_key` are accepted for
    Monarch's programs and not used: clients prove the job's token instead."""
    host, port = _parsed(address)
    os.environ.setdefault("CROWN_DEBUG_TCP", f"{host}:{port}")

    def serve() -> None:  # on rank 0; the other ranks serve its actors
        if ca == "trust_all_connections":
            print("crown: ca='trust_all_connections' is not honoured: clients must prove this "
                  "job's token (only its user can read it)", flush=True)
        _console.serve()

    _client.run(serve)  # as `crown serve` (crownrun --serve) does


def attach_to_workers(*, workers: List, ca: Optional[str] = None, name: Optional[str] = None,
                      private_key=None):
    """Attaches this process to the served job whose rank 0 listens at
    workers[0] (run_worker_loop_forever's address, or a Future of it; the
    job's user's CROWN_DEBUG_DIR holds its token) and returns its hosts as a
    HostMesh of ``{"hosts": len(workers)}``. Raises crown.AttachError when
    no such job of this user runs or it refuses, ValueError when the job's
    hosts are not len(workers). `ca`, `name` and `private_key` are
    Monarch's, accepted and not used (see this module's docstring)."""
    if not workers:
        raise ValueError("attach_to_workers needs the workers' addresses (tcp://HOST:PORT)")
    first = workers[0]
    host, port = _parsed(first if isinstance(first, str) else first.get())
    job = _job_at(host, port)
    attachment = _attach.attach(job)
    hosts = attachment.host_mesh
    if hosts.sizes["hosts"] != len(workers):
        raise ValueError(f"the served job at {workers[0]} runs on {hosts.sizes['hosts']} hosts, "
                         f"but {len(workers)} workers were named")
    return hosts


def _job_at(host: str, port: int) -> "_jobs.Job":
    try:
        running = _jobs.jobs()
    except _jobs.CliError as error:
        raise _attach.AttachError(str(error)) from None
    for job in running:
        try:
            listed_host, listed_port, node = _jobs.read_private(job.base + ".tcp").split()[:3]
        except (_jobs.CliError, ValueError):
            continue
        if int(listed_port) == port and host in ("", listed_host, node):
            return job
    raise _attach.AttachError(f"no served job of yours listens at tcp://{host or '*'}:{port} "
                              f"(looked in {_jobs.debug_directory()}): run "
                              f"run_worker_loop_forever(address=...) on every rank of a launch, "
                              f"and share CROWN_DEBUG_DIR with this client")
