"""Finding this user's crown jobs and reaching their servers (the CLI's
side of crown/debug/server.h and _console.py).

A job's controller leaves, in the debug directory (made 0700 for its user
alone; CROWN_DEBUG_DIR, else $XDG_RUNTIME_DIR/crown or /tmp/crown-UID):

    job-PID.token         32 random bytes, hex (0600): what a client proves it read
    job-PID.sock          the debug server's Unix socket (crown stacks, status, debug)
    job-PID.console       a served job's console (crownrun --serve)
    job-PID.tcp           with CROWN_DEBUG_TCP: "HOST PORT NODE" of the debug server's
    job-PID.console.tcp   ... and of the console's TCP port

A client on the controller's node uses the Unix sockets (where the server
also checks, with SO_PEERCRED, that it is the same user). One on another
node, with CROWN_DEBUG_DIR on a filesystem both see (the user's home), uses
the TCP ports, where the token's HMAC alone proves the user: nobody else
can read the file.

The client trusts what the server trusts and no more (issue 43): the
directory and every file it reads there must be this user's and private
(another user may make /tmp/crown-UID first, with a token and sockets of
its own), a Unix socket's server must run as this user (SO_PEERCRED), and
every server must prove the token back (_handshake.py) before a command,
a script or a pdb line is sent to it.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import socket
import stat
import struct
import sys
import time
from typing import List, NamedTuple, Optional, Tuple

from . import _handshake

CONSOLE_HELLO = "crown-console"  # a served job's console greets with this (_console.py)


class CliError(Exception):
    """What the user is told, with exit code 1."""


class JobEnded(CliError):
    """The job ended while a client was using it (its controller exited and
    took its files along): not a fault, the end of a conversation."""


def debug_directory() -> str:
    """Where the jobs' servers listen (as debugDirectory() in C++)."""
    if os.environ.get("CROWN_DEBUG_DIR"):
        return os.environ["CROWN_DEBUG_DIR"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "crown")
    return f"/tmp/crown-{os.geteuid()}"


def tcp_setting() -> Optional[Tuple[str, int, str]]:
    """CROWN_DEBUG_TCP=[HOST][:PORT] (as tcpSetting() in C++): (the address
    to bind, the port, the host to advertise), or None when unset. An empty
    HOST or 0.0.0.0 binds every interface and advertises this node's name;
    PORT 0 (the default) takes a free one."""
    text = os.environ.get("CROWN_DEBUG_TCP", "")
    if not text:
        return None
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "0")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"CROWN_DEBUG_TCP={text!r}: expected [HOST][:PORT], PORT from 0 to 65535")
    if host in ("", "0.0.0.0"):
        return "0.0.0.0", int(port), socket.gethostname()
    return host, int(port), host


def write_private(path: str, text: str) -> None:
    """`text` in a new 0600 file at `path` (one left by a killed job replaced)."""
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_private_directory(directory: str) -> None:
    """Raises CliError unless `directory` is a real directory of this user
    that nobody else may enter: the debug server's own rule."""
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise CliError(f"the debug directory {directory} is not a directory (a link, say): "
                       f"crown will not look for jobs there; remove it, or set CROWN_DEBUG_DIR")
    if info.st_uid != os.geteuid():
        raise CliError(f"the debug directory {directory} belongs to {_owner(info.st_uid)}, not "
                       f"to you: only its owner may use it. If you did not make it, another "
                       f"user may have, to pass as your jobs' servers: crown will not talk to "
                       f"anything in it. Remove it, or set CROWN_DEBUG_DIR to a directory of "
                       f"yours")
    if info.st_mode & 0o077:
        raise CliError(f"the debug directory {directory} is open to others (mode "
                       f"{stat.S_IMODE(info.st_mode):o}; a job makes it 0700): crown will not "
                       f"trust what is in it. Remove it, or set CROWN_DEBUG_DIR")


def _check_info(path: str, info: os.stat_result, kind) -> None:
    """CliError unless `info` (of `path`) is of `kind` (stat.S_ISREG,
    S_ISSOCK), this user's and private, as the server leaves its files."""
    if not kind(info.st_mode):
        raise CliError(f"{path} is not what a job leaves there (a link, say): refusing it")
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise CliError(f"{path} belongs to {_owner(info.st_uid)} with mode "
                       f"{stat.S_IMODE(info.st_mode):o}; a job's files are its user's and "
                       f"private (0600): refusing it")


def check_private(path: str, kind) -> os.stat_result:
    """`path` as the server leaves it (_check_info), not followed if a link."""
    try:
        info = os.lstat(path)
    except OSError as error:
        raise CliError(f"cannot use {path}: {error.strerror}") from None
    _check_info(path, info, kind)
    return info


def read_private(path: str) -> str:
    """A job's small text file, checked as it is opened (no link followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
    with os.fdopen(fd) as f:
        _check_info(path, os.fstat(f.fileno()), stat.S_ISREG)
        return f.read(4096)


class Job(NamedTuple):
    pid: int   # the controller's, on its node
    base: str  # the debug directory's job-PID
    node: str  # the controller's node ("" when unknown: a job without TCP)

    def here(self) -> bool:
        return self.node in ("", socket.gethostname())

    def debug_address(self) -> str:
        return _address(self, ".sock", ".tcp")

    def console_address(self) -> str:
        if not os.path.exists(self.base + ".console") and not os.path.exists(
                self.base + ".console.tcp"):
            raise CliError(f"the job {self.pid} has no console: only a served job has one "
                           f"(crownrun --serve -n N)")
        return _address(self, ".console", ".console.tcp")


def _ended(job: Job, within: float = 0.0) -> bool:
    """Whether `job` has ended (its token went, or its controller on this
    node), waiting up to `within` seconds to see it: a server closes its
    sockets a moment before its process exits."""
    deadline = time.monotonic() + within
    while True:
        if not os.path.exists(job.base + ".token"):
            return True
        if job.here():
            try:
                os.kill(job.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _address(job: Job, unix_suffix: str, tcp_suffix: str) -> str:
    """A Unix socket's path on the controller's node, else "tcp:HOST:PORT"."""
    if job.here() and os.path.exists(job.base + unix_suffix):
        return job.base + unix_suffix
    if job.here() and _ended(job):
        raise JobEnded(f"the job {job.pid} has ended")
    try:
        host, port = read_private(job.base + tcp_suffix).split()[:2]
        return f"tcp:{host}:{port}"
    except (CliError, ValueError):
        raise CliError(f"the job {job.pid} runs on {job.node or 'another node'}, and has no TCP "
                       f"port (its controller needs CROWN_DEBUG_TCP set to be reached from "
                       f"another node)") from None


def jobs(directory: Optional[str] = None) -> List[Job]:
    """This user's jobs (in `directory`, the debug directory by default):
    those whose controller lives on this node, and those elsewhere that
    listen on TCP (a shared CROWN_DEBUG_DIR)."""
    found = []
    directory = directory or debug_directory()
    if not os.path.lexists(directory):
        return found
    check_private_directory(directory)
    for token in sorted(glob.glob(os.path.join(directory, "job-*.token"))):
        base = token[:-len(".token")]
        try:
            check_private(token, stat.S_ISREG)
        except CliError as error:
            print(f"crown: skipping {token}: {error}", file=sys.stderr)
            continue
        pid = int(re.search(r"job-(\d+)$", base).group(1))
        node = ""
        try:
            node = read_private(base + ".tcp").split()[2]
        except (CliError, IndexError):
            pass
        job = Job(pid, base, node)
        if job.here():
            if not os.path.exists(base + ".sock"):
                continue
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue  # a job that ended without removing its files (killed)
            except PermissionError:
                pass
        found.append(job)
    return found


def choose(pid: Optional[int]) -> Job:
    running = jobs()
    if pid is not None:
        for job in running:
            if job.pid == pid:
                return job
        raise CliError(f"no crown job with controller pid {pid} (in {debug_directory()}); "
                       f"`crown jobs` lists them")
    if not running:
        raise CliError(f"no crown job of this user runs on this host (looked in "
                       f"{debug_directory()}); run this on the controller's (rank 0's) host, "
                       f"or share CROWN_DEBUG_DIR and set CROWN_DEBUG_TCP for the job")
    if len(running) > 1:
        raise CliError("several crown jobs run here; pick one with --job PID:\n" +
                       "\n".join(f"  {job.pid}\t{job.node or 'this node'}" for job in running))
    return running[0]


def _open(address: str, timeout: float) -> socket.socket:
    if address.startswith("tcp:"):
        host, _, port = address[len("tcp:"):].rpartition(":")
        try:
            return socket.create_connection((host, int(port)), timeout=timeout)
        except OSError as error:
            raise CliError(f"cannot reach the job's server at {host}:{port}: {error}") from None
    check_private(address, stat.S_ISSOCK)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", creds)
    except OSError as error:
        sock.close()
        raise CliError(f"cannot reach the job's server at {address}: {error}") from None
    if uid != os.geteuid():
        sock.close()
        raise CliError(f"the server at {address} runs as {_owner(uid)} (pid {pid}), not as "
                       f"you: it is not your job's, and nothing was sent to it")
    return sock


def connect(job: Job, address: str, command: str, timeout: float,
            hello: str = "crown-debug") -> socket.socket:
    """A socket to one of `job`'s servers (debug or console) that proved it
    holds the job's token, and to which `command` was sent (only then); its
    answer is left to read."""
    return connect_session(job, address, command, timeout, hello)[0]


def connect_session(job: Job, address: str, command: str, timeout: float,
                    hello: str) -> Tuple[socket.socket, bytes]:
    """connect(), and the handshake's session key (_handshake.session_key)."""
    try:
        token = bytes.fromhex(read_private(job.base + ".token").strip())
    except ValueError:
        raise CliError(f"the job's token {job.base}.token is not hex") from None
    try:
        sock = _open(address, timeout)
    except CliError:
        if _ended(job, within=1.0):
            raise JobEnded(f"the job {job.pid} has ended") from None
        raise
    try:
        key = _handshake.client(sock, token, hello, command, address)
        return sock, key
    except (_handshake.HandshakeError, OSError) as error:
        sock.close()
        if _ended(job, within=1.0):  # it closed on us as it ended
            raise JobEnded(f"the job {job.pid} has ended") from None
        if isinstance(error, _handshake.HandshakeError):
            raise CliError(str(error)) from None
        raise CliError(f"the job's server at {address} went away: {error}") from None
    except BaseException:
        sock.close()
        raise


def request(job: Job, command: str, timeout: float) -> bytes:
    """Proves the token to the job's debug server, sends `command`, returns
    the whole answer."""
    with connect(job, job.debug_address(), command, timeout) as sock:
        answer = sock.makefile("rb").read()
    if answer.startswith(b"refused: ") or answer.startswith(b"error: "):
        raise CliError(answer.decode("utf-8", "replace").strip())
    return answer
