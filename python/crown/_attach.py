"""Attaching to a served job (issue 46; docs/processes.md, "Attaching to a
served job"): the client's side (_attach_server.py is the job's).

``crown.attach()`` in a process that no launcher started (a script, a
notebook on the login node) reaches the served job's console (crownrun
--serve, _console.py) as `crown console` does, proving the job's token from
the user's private debug directory. The job offers it a spare rank slot,
with the fabric secret masked by the handshake's session key; it joins the
fabric there and drives the job's ranks as their controller: spawn, call,
cast, tensors, RDMA. Only one client is attached at a time.

Detaching (``crown.detach()``, ``Attachment.detach()``, the interpreter's
exit, or the process's death) leaves the job and every actor on its ranks
alive. The actor meshes a client spawned are kept by name in the job, so
the next client finds them (``Attachment.actor_mesh(name)``), as are the
launch ranks its spawn_procs handed out, which are not handed out again.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import socket
import sys
import threading
from typing import Dict, Optional

from . import _context, _crown, _hosts, _jobs, _pdb, _pickle, _stacks
from ._jobs import CONSOLE_HELLO, Job
from ._meshes import ActorMesh, ProcMesh


class AttachError(RuntimeError):
    """The job refused this client, or it could not join."""


class Attachment:
    """This process's attachment to a served job."""

    def __init__(self, job: Job, sock: socket.socket, lines, rank: int, kept: Dict[str, dict]):
        self.job = job
        self.rank = rank  # this client's rank in the job's fabric
        self._sock = sock
        self._lock = threading.Lock()
        self._kept = kept
        self._detached = False
        self._ended = threading.Event()  # the job said "detached", or the connection closed
        threading.Thread(target=self._listen, args=(lines,), daemon=True,
                         name="crown-attach").start()

    def _listen(self, lines) -> None:
        """What the job sends while this client is attached: the lines its
        workers print (as a launch's reach its terminal), then the end of a
        detach."""
        try:
            for line in lines:
                message = json.loads(line)
                for key, stream in (("out", sys.stdout), ("err", sys.stderr)):
                    if key in message:
                        stream.write(message[key])
                        stream.flush()
                if message.get("detached"):
                    return
        except (OSError, ValueError):
            pass  # the job is gone: nothing more comes
        finally:
            self._ended.set()

    @property
    def size(self) -> int:
        """Ranks the job launched."""
        return _crown.size()

    @property
    def procs(self) -> ProcMesh:
        """Every rank of the job as {"hosts": H, "procs": P}, shared (as
        crown.world() in the job)."""
        return ProcMesh(_crown.world_shape())

    @property
    def host_mesh(self) -> _hosts.HostMesh:
        """The job's hosts: spawn_procs hands out ranks that no client's
        earlier call took (Monarch's attach_to_workers' HostMesh)."""
        return _hosts.HostMesh(_hosts.launch_hosts())

    def actor_meshes(self) -> Dict[str, ActorMesh]:
        """The actor meshes that clients spawned in this job and did not
        stop, by name (the latest of a name): they live on across detaching."""
        return {name: _pickle.loads(base64.b64decode(entry["mesh"]))
                for name, entry in self._kept.items()}

    def actor_mesh(self, name: str) -> ActorMesh:
        """The actor mesh named `name` that a client spawned here."""
        meshes = self.actor_meshes()
        if name not in meshes:
            raise KeyError(f"no actor mesh named {name!r} was kept in this job (kept: "
                           f"{sorted(meshes) or 'none'})")
        return meshes[name]

    def _tell(self, **message) -> None:
        with self._lock:
            if self._detached:
                return
            try:
                self._sock.sendall((json.dumps(message) + "\n").encode("utf-8"))
            except OSError as error:
                _crown.log("warn", f"attach: the served job's controller is unreachable: {error}")

    def _kept_mesh(self, name: str, mesh: ActorMesh) -> None:
        if name.startswith("crown-") or self.rank in mesh._shape.ranks():
            return  # crown's own (crown-starter, ...), or on this process: it goes with it
        # A copy without the spawn under way, which pickling would wait for.
        copy = ActorMesh(mesh._shape, mesh._local, mesh._cls, mesh._name)
        data = base64.b64encode(_pickle.dumps(copy)).decode("ascii")
        self._kept[name] = {"local": mesh._local, "mesh": data}
        self._tell(keep=name, local=mesh._local, mesh=data)

    def _stopped_mesh(self, local: int) -> None:
        for name in [n for n, entry in self._kept.items() if entry["local"] == local]:
            del self._kept[name]
        self._tell(forget=local)

    def detach(self) -> None:
        """Leaves the job as it is: its ranks and actors live on; the next
        crown.attach() (from a new process) finds the actor meshes. This
        process cannot attach again (crown starts once per process)."""
        global _attachment
        with self._lock:
            if self._detached:
                return
            self._detached = True
        _context.mesh_spawned = _context.mesh_stopped = _context.ranks_handed_out = None
        try:
            self._sock.sendall(b'{"detach": true}\n')
            self._ended.wait(30.0)  # {"detached": true}: every rank expects it, output is in
        except OSError:
            pass  # the job is gone: there is nobody to tell
        finally:
            self._sock.close()
        _crown.leave()
        _attachment = None

    def __enter__(self) -> "Attachment":
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    def __repr__(self):
        return (f"Attachment(job {self.job.pid}, {self.size} ranks, this client rank "
                f"{self.rank})")


_attachment: Optional[Attachment] = None


def attach(job=None, timeout: float = 60.0) -> Attachment:
    """Attaches this process to a served job of this user (crownrun --serve)
    as its controller: `job` is the controller's pid (`crown jobs` lists
    them), a crown.job.SlurmJob (the served job it runs, once it serves),
    or None for the only one. Raises AttachError when the job refuses
    (another client is attached) or this process cannot join, and
    RuntimeError when this process already runs crown."""
    global _attachment
    if _crown.initialised():
        raise RuntimeError("this process already runs crown (it was launched, attached, or "
                           "started procs): attach from a fresh process")
    served_job = getattr(job, "served_job", None)
    if callable(served_job):  # a SlurmJob (crown.job, which sits above this module)
        job = served_job()
    if not isinstance(job, Job):
        try:
            job = _jobs.choose(job)
        except _jobs.CliError as error:
            raise AttachError(str(error)) from None
    try:
        sock, key = _jobs.connect_session(job, job.console_address(), "attach", timeout,
                                          hello=CONSOLE_HELLO)
    except _jobs.CliError as error:
        raise AttachError(str(error)) from None
    sock.settimeout(timeout)
    try:
        lines = sock.makefile("rb")
        offer = json.loads(lines.readline() or b'{"refused": "the job closed the connection"}')
        if "refused" in offer:
            raise AttachError(f"the job {job.pid} refused to attach this client: "
                              f"{offer['refused']}")
        try:
            rank, host, address = _crown.attach(base64.b64decode(offer["offer"]), key)
        except Exception as error:
            sock.sendall((json.dumps({"error": str(error)}) + "\n").encode("utf-8"))
            raise AttachError(f"this process cannot join the job {job.pid}: {error}") from None
        sock.sendall((json.dumps({"answer": [host, base64.b64encode(address).decode("ascii")],
                                  "pid": os.getpid()}) + "\n").encode("utf-8"))
        admitted = json.loads(lines.readline() or b"{}")
        if "attached" not in admitted:
            raise AttachError(f"the job {job.pid} did not admit this client (it ended, or its "
                              f"ranks did not answer)")
    except (OSError, ValueError) as error:
        sock.close()
        raise AttachError(f"attaching to the job {job.pid} failed: {error}") from None
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    _front_end()
    _attachment = Attachment(job, sock, lines, rank, dict(offer.get("kept", {})))
    _hosts.handed_out_before(offer.get("handed_out", []))
    _context.mesh_spawned = _attachment._kept_mesh
    _context.mesh_stopped = _attachment._stopped_mesh
    _context.ranks_handed_out = lambda ranks: _attachment._tell(handed_out=list(ranks))
    atexit.register(detach)
    return _attachment


def detach() -> None:
    """Detaches this process from its served job, if it is attached."""
    if _attachment is not None:
        _attachment.detach()


def attachment() -> Optional[Attachment]:
    """This process's attachment, or None."""
    return _attachment


def _front_end() -> None:
    """What crown.init puts in place in a process, for a client."""
    _stacks.install()  # the job's `crown stacks` reaches this client's threads too
    _pdb.install()
    _context.tracing = _crown.tracing()
    _context.front_end_ready.set()
    _pickle.main_by_value(True)  # the job's ranks do not run this client's __main__
