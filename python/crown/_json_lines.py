"""JSON lines to a client of the served job's console socket (_console.py,
_attach_server.py), from several threads."""

from __future__ import annotations

import json
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
