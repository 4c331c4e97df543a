"""The mutual token handshake of the job's servers (protocol 2), both sides:
the debug server's client (_jobs.py) and the console's server and client
(_console.py, _console_cli.py). The C++ debug server speaks the same lines
(src/debug/admission.h):

    server: "HELLO 2 SNONCE\\n"        HELLO: crown-debug or crown-console
    client: "CNONCE CPROOF\\n"         CPROOF = HMAC(token, "HELLO client" SNONCE CNONCE)
    server: "SPROOF\\n"                SPROOF = HMAC(token, "HELLO server" SNONCE CNONCE)
            (or "refused: why\\n", and it closes)
    client: "COMMAND\\n"               only once SPROOF checks out

Nonces are 32 random bytes, everything in hex. Both sides can then derive
a session key, HMAC(token, "HELLO session" SNONCE CNONCE), that nobody
without the token can: attach masks the fabric secret with it (_attach.py). The server proves the token
too, so a process that took a socket's name or a TCP port cannot pass as
the job's server and hear what a client sends (a script's source, a pdb
line).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import time
from typing import Optional, Tuple

VERSION = "2"
MAX_LINE = 4096


class HandshakeError(Exception):
    """The other side is not the job's (or not a crown server)."""


def proof(token: bytes, hello: str, role: str, server_nonce: bytes, client_nonce: bytes) -> str:
    data = f"{hello} {role}".encode("ascii") + server_nonce + client_nonce
    return hmac.new(token, data, hashlib.sha256).hexdigest()


def session_key(token: bytes, hello: str, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """32 bytes known only to holders of the token, fresh for each handshake."""
    data = f"{hello} session".encode("ascii") + server_nonce + client_nonce
    return hmac.new(token, data, hashlib.sha256).digest()


def read_line(sock: socket.socket, deadline: Optional[float] = None) -> bytes:
    """One line, byte by byte (nothing after it is consumed); b"" when the
    other side closed first. Past `deadline` (time.monotonic()), a timeout
    error, however slowly the bytes come."""
    line = b""
    while not line.endswith(b"\n") and len(line) < MAX_LINE:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("the handshake took too long")
            sock.settimeout(left)
        got = sock.recv(1)
        if not got:
            return b""
        line += got
    return line


def client(sock: socket.socket, token: bytes, hello: str, command: str, where: str) -> bytes:
    """Proves the token to the server at `where`, checks that it proves it
    back, then sends `command`; returns the session key. Raises
    HandshakeError, having sent nothing of `command`, when the server is not
    the job's."""
    greeting = read_line(sock).decode("utf-8", "replace")
    words = greeting.split()
    if len(words) != 3 or words[:2] != [hello, VERSION]:
        raise HandshakeError(f"the server at {where} said {greeting.strip()!r}")
    try:
        server_nonce = bytes.fromhex(words[2])
    except ValueError:
        raise HandshakeError(f"the server at {where} sent a malformed greeting") from None
    client_nonce = os.urandom(32)
    mine = proof(token, hello, "client", server_nonce, client_nonce)
    sock.sendall(f"{client_nonce.hex()} {mine}\n".encode("ascii"))
    answer = read_line(sock).decode("utf-8", "replace").strip()
    if answer.startswith(("refused: ", "error: ")):
        raise HandshakeError(answer)
    expected = proof(token, hello, "server", server_nonce, client_nonce)
    if not hmac.compare_digest(answer.encode(), expected.encode()):
        raise HandshakeError(f"the server at {where} could not prove that it holds the job's "
                             f"token: it is not this job's server, and nothing was sent to it")
    sock.sendall(f"{command}\n".encode("utf-8"))  # a pdb line may be any text
    return session_key(token, hello, server_nonce, client_nonce)


def server(sock: socket.socket, token: bytes, hello: str, timeout: float) -> Optional[str]:
    """The server's side: greets, checks the client's proof, proves back;
    the client's command, or None when it was refused or left. The whole
    exchange gets `timeout` seconds (socket.timeout past them)."""
    return server_session(sock, token, hello, timeout)[0]


def server_session(sock: socket.socket, token: bytes, hello: str,
                   timeout: float) -> Tuple[Optional[str], bytes]:
    """server(), and the session key (session_key)."""
    deadline = time.monotonic() + timeout
    server_nonce = os.urandom(32)
    sock.sendall(f"{hello} {VERSION} {server_nonce.hex()}\n".encode("ascii"))
    words = read_line(sock, deadline).decode("utf-8", "replace").split()
    try:
        client_nonce = bytes.fromhex(words[0]) if len(words) == 2 else b""
    except ValueError:
        client_nonce = b""
    expected = proof(token, hello, "client", server_nonce, client_nonce)
    if len(client_nonce) != 32 or not hmac.compare_digest(words[1].encode(), expected.encode()):
        sock.sendall(b"refused: the proof does not match the job's token\n")
        return None, b""
    sock.sendall(proof(token, hello, "server", server_nonce, client_nonce).encode("ascii") + b"\n")
    command = read_line(sock, deadline)
    key = session_key(token, hello, server_nonce, client_nonce)
    return (command.decode("utf-8", "replace").strip() if command else None), key
