"""The served job's side of attach (issue 46; _attach.py is the client's).

A client that proved the job's token on the console's socket (_console.py)
and sent "attach" is offered a spare rank slot (Runtime::offerAttach): the
offer's fabric secret is masked with the handshake's session key, which
only holders of the token can derive (SEC-1). It joins the fabric there,
answers where it listens, and every live rank admits it. From then on it
drives the job's ranks as a controller: it spawns and owns actor meshes,
calls, casts, tensors, RDMA.

One client at a time: a second is refused while the first is attached. The
connection stays open while it is attached and carries, as JSON lines:

    client: {"keep": NAME, "local": ID, "mesh": B64}  an actor mesh it spawned
            {"forget": ID}                            ... stopped
            {"handed_out": [RANKS]}                   launch ranks spawn_procs gave
            {"detach": true}                          it leaves; the job lives on
    server: {"out": TEXT} / {"err": TEXT}                 the workers' lines (below)
            {"detached": true}

While a client is attached, the lines the job's actors print (the
workers', forwarded to this controller and merged, "[rank 3] ...",
crown/debug/logs.h, and those of the actors on this controller's own
rank) go to it rather than to the job's own output, as a launch's go to
its terminal.

What it kept is handed to the next client (re-attach finds its actor
meshes); the meshes themselves live on the job's ranks, not here. When the
connection drops without a detach (the client was killed), the client's
departure is expected all the same: its links closing is no fault of the
job's.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
from typing import Dict, List, Optional

from . import _crown, _logs
from ._json_lines import Sender, relay

_lock = threading.Lock()
_left = threading.Condition(_lock)  # notified when the attached client has gone
# A client that was just killed may not have been seen to go yet (its
# connection's end is on its way): a newcomer waits this long before it is
# refused, so that a restarted notebook attaches at once.
LEAVING_GRACE_S = 3.0
_client: Optional[dict] = None       # the attached client: {"pid", "host", "rank"}
_kept: Dict[str, dict] = {}          # actor meshes by name: {"local": id, "mesh": b64 pickle}
_handed_out: List[int] = []          # launch ranks the clients' spawn_procs took


class _WorkerOutput:
    """The workers' forwarded lines to the client, through a pipe per
    stream, until close() (then to the job's own output again)."""

    def __init__(self, client: Sender):
        self._pipes = [os.pipe(), os.pipe()]
        self._readers = [relay(read, kind, client)  # what cannot be sent is dropped
                         for (read, _), kind in zip(self._pipes, ("out", "err"))]
        _crown.redirect_worker_output(self._pipes[0][1], self._pipes[1][1])
        _logs.forward_actors(True)  # rank 0 is a member too: its actors' lines as theirs

    def close(self) -> None:
        _logs.forward_actors(False)
        _crown.redirect_worker_output(1, 2)  # what was due is in the pipes by now
        for _, write in self._pipes:
            os.close(write)
        for reader in self._readers:
            reader.join(timeout=10)


def serve(sock: socket.socket, key: bytes) -> None:
    """One client's whole attachment, on its connection's thread."""
    global _client
    lines = sock.makefile("rb")
    client = Sender(sock)  # (the output relays send on it too, from their threads)
    with _lock:
        _left.wait_for(lambda: _client is None, timeout=LEAVING_GRACE_S)
        if _client is not None:
            client.send(refused=f"another client (pid {_client['pid']} on {_client['host']}, rank "
                                f"{_client['rank']}) is attached to this job as its controller: "
                                f"one at a time. Detach it first (crown.detach(), or end its "
                                f"process)")
            return
        try:
            slot, offer = _crown.attach_offer(key)
        except Exception as error:  # noqa: BLE001 - said to the client
            client.send(refused=str(error))
            return
        _client = {"pid": 0, "host": "?", "rank": slot}
        kept = dict(_kept)
        handed_out = list(_handed_out)
    admitted = False
    output: Optional[_WorkerOutput] = None
    try:
        client.send(offer=base64.b64encode(offer).decode("ascii"), rank=slot,
              size=_crown.size(), kept=kept, handed_out=handed_out, server_pid=os.getpid())
        answer = json.loads(lines.readline() or b"{}")
        if "answer" not in answer:
            return  # it could not join (it says why itself) or left
        host, address = answer["answer"]
        with _lock:
            _client.update(pid=int(answer.get("pid", 0)), host=str(host))
        _crown.admit_attached(slot, str(host), base64.b64decode(address))
        admitted = True
        client.send(attached=slot)
        output = _WorkerOutput(client)
        _crown.log("info", f"attach: a client (pid {_client['pid']} on {host}) drives the job "
                           f"as rank {slot}")
        for line in lines:
            message = json.loads(line)
            if message.get("detach"):
                _crown.flush_logs(5.0)  # what the workers printed so far goes to the client
                output.close()
                output = None
                _crown.release_attached(slot)
                admitted = False
                client.send(detached=True)
                return
            _record(message)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # the client left, or sent what is not the protocol: its attachment ends
    except Exception as error:  # noqa: BLE001 - the served job outlives a failed attach
        _crown.log("warn", f"attach: a client's attachment failed: {error}")
    finally:
        if output is not None:
            output.close()
        if admitted:  # it went without a word (killed, say): it is gone all the same
            try:
                _crown.release_attached(slot)
            except Exception as error:  # noqa: BLE001 - the job ends meanwhile, say
                _crown.log("warn", f"attach: rank {slot} left: {error}")
            _crown.log("info", f"attach: the client on rank {slot} left without detaching")
        with _lock:
            _client = None
            _left.notify_all()


def _record(message: dict) -> None:
    with _lock:
        if "keep" in message:
            name = str(message["keep"])
            _kept[name] = {"local": int(message["local"]), "mesh": str(message["mesh"])}
        elif "forget" in message:
            local = int(message["forget"])
            for name in [n for n, entry in _kept.items() if entry["local"] == local]:
                del _kept[name]
        elif "handed_out" in message:
            _handed_out[:] = sorted(set(_handed_out) | {int(r) for r in message["handed_out"]})
