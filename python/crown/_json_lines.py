"""JSON lines to a client of the served job's console socket (_console.py,
_attach_server.py), from several threads."""

from __future__ import annotations

import json
import os
import socket
import threading


class Sender:
    """One connection's sending side; a message that cannot be sent (the
    client left) is dropped, and so is every later one: the work it was
    about goes on."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._lock = threading.Lock()
        self.gone = False

    def send(self, **message) -> None:
        data = (json.dumps(message) + "\n").encode("utf-8")
        with self._lock:
            if self.gone:
                return
            try:
                self._sock.sendall(data)
            except OSError:
                self.gone = True


def relay(fd: int, kind: str, client: Sender) -> threading.Thread:
    """A thread that sends what comes through the pipe `fd` to `client` as
    {kind: text} until the pipe's write end closes; then it closes `fd`."""

    def run() -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while True:
                data = pipe.read(65536)
                if not data:
                    return
                client.send(**{kind: data.decode("utf-8", "replace")})

    thread = threading.Thread(target=run, daemon=True, name=f"crown-relay-{kind}")
    thread.start()
    return thread
