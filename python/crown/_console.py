"""The persistent console's server (issue 15): what ``crownrun --serve`` runs.

Every rank runs ``python3 -m crown serve``; rank 0 then keeps the job's mesh
alive with no program of its own, and serves `crown console` (_console_cli.py)
on job-PID.console, a Unix socket beside the debug server's (crown/debug/
server.h), in the same private directory and behind the same mutual token
handshake (_handshake.py; with CROWN_DEBUG_TCP on a TCP port too, the debug
server's plus one, written to job-PID.console.tcp). The command the client
sends once the server proved the token is "console", "run" or "stop"; then
JSON lines go both ways (_serve_client below). As in the debug server,
handshakes are bounded (_Admission): TCP clients that have not proved the
token hold a few threads at most, a few per address, and never delay a
local one.

Code runs on the controller's main thread, one piece at a time whoever sent
it, so an interrupt (Ctrl-C in a console) is a SIGINT to that thread, as it
would be in a terminal. While a piece runs, the controller's file
descriptors 1 and 2 go to the client that sent it: its own prints, the
workers' forwarded output (_logs.py) and crown's log lines. The REPL's
namespace lives as long as the job, so what one console made (procs, actor
meshes) the next one finds; a script (``crown console --run``) gets a fresh
``__main__`` as ``python3 script.py`` would, and the actor meshes it spawned
are stopped when it ends, so that a rerun starts from what a fresh launch
would.
"""

from __future__ import annotations

import builtins
import code
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Callable, Optional, Tuple

from . import (_attach_server, _context, _crown, _exit_codes, _handshake, _logs, _placement,
               _supervision)
from ._jobs import CONSOLE_HELLO, debug_directory, tcp_setting, write_private
from ._json_lines import Sender, relay

_HANDSHAKE_TIMEOUT_S = 5.0
_MAX_HANDSHAKES = 64              # at once, per pool (local, remote), as the debug server's
_MAX_HANDSHAKES_PER_ADDRESS = 4   # remote ones from one peer address
_LISTEN_BACKLOG = 128             # connections the kernel queues for the accepting thread


class _Admission:
    """Bounds on the handshakes under way (issue 43): a client over a bound
    is closed at once rather than given a thread for its 5 s window."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool = {True: 0, False: 0}  # local: count
        self._by_address = {}

    def enter(self, local: bool, address: str) -> bool:
        with self._lock:
            if self._pool[local] >= _MAX_HANDSHAKES or (
                    not local and self._by_address.get(address, 0) >= _MAX_HANDSHAKES_PER_ADDRESS):
                return False
            self._pool[local] += 1
            if not local:
                self._by_address[address] = self._by_address.get(address, 0) + 1
            return True

    def leave(self, local: bool, address: str) -> None:
        with self._lock:
            self._pool[local] -= 1
            if not local:
                self._by_address[address] -= 1
                if not self._by_address[address]:
                    del self._by_address[address]


def socket_path(pid: int) -> str:
    return os.path.join(debug_directory(), f"job-{pid}.console")


class _Capture:
    """fds 1 and 2 of this process go to `client` while a piece of code runs:
    a pipe each, drained by a thread, restored (and drained) at the end."""

    def __init__(self, client: Sender):
        self._client = client
        self._saved = []
        self._readers = []

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, kind in ((1, "out"), (2, "err")):
            read_end, write_end = os.pipe()
            self._saved.append((fd, os.dup(fd)))
            os.dup2(write_end, fd)
            os.close(write_end)
            self._readers.append(relay(read_end, kind, self._client))
        return self

    def __exit__(self, *exc):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            for fd, saved in self._saved:
                os.dup2(saved, fd)  # the pipe's last write end closes: its reader ends
                os.close(saved)
            for reader in self._readers:
                reader.join()


class _Piece:
    """A piece of code for the main thread, and what to tell its client after
    (its output is all sent by then)."""

    def __init__(self, client: Sender, run: Callable[[], object],
                 then: Callable[[object], None]):
        self.client = client
        self.run = run
        self.then = then
        self.done = threading.Event()


class ConsoleServer:
    def __init__(self):
        self._pieces: "queue.Queue[Optional[_Piece]]" = queue.Queue()
        self._running: Optional[_Piece] = None  # on the main thread now
        self._running_lock = threading.Lock()
        self._stopping = threading.Event()
        # The package, imported by now (whoever serves imported it): an
        # import here would make a cycle (crown.actor's workers serve too).
        crown = sys.modules["crown"]
        self._namespace = {"__name__": "__console__", "__builtins__": builtins,
                           "crown": crown, "procs": crown.world()}
        self._repl = code.InteractiveConsole(self._namespace, filename="<console>")
        token_path = os.path.join(debug_directory(), f"job-{os.getpid()}.token")
        if not os.path.exists(token_path):
            raise RuntimeError("crownrun --serve needs the job's debug server, whose token the "
                               "console shares: unset CROWN_DEBUG_SERVER=off")
        with open(token_path) as f:
            self._token = bytes.fromhex(f.read().strip())
        self.path = socket_path(os.getpid())
        if os.path.exists(self.path):
            os.unlink(self.path)  # a pid reused after a job that was killed
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        os.chmod(self.path, 0o600)
        self._listeners = [listener]
        self._admission = _Admission()
        self._tcp_file = None
        tcp = tcp_setting()
        if tcp is not None:  # for consoles on other nodes (the debug server's port + 1)
            host, port, advertised = tcp
            listener = socket.create_server((host, port + 1 if port else 0))
            self._listeners.append(listener)
            self._tcp_file = self.path + ".tcp"
            write_private(self._tcp_file, f"{advertised} {listener.getsockname()[1]} "
                                          f"{socket.gethostname()}\n")
        # A burst of connections (issue 43's flood) waits in the kernel's
        # queue until the accepting thread refuses it. A short queue drops
        # them instead, and each dropped client, the job's user's included,
        # waits a second for the kernel to send its SYN again.
        for listener in self._listeners:
            listener.listen(_LISTEN_BACKLOG)

    # -- the main thread ------------------------------------------------------

    def serve_forever(self) -> None:
        """Runs the pieces the consoles send until `crown stop` (or Ctrl-C on
        the job's own terminal)."""
        for listener in self._listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True,
                             name="crown-console").start()
        try:
            while True:
                try:
                    piece = self._pieces.get()
                    if piece is None:
                        return
                    self._run(piece)
                except KeyboardInterrupt:
                    if self._running is None and not self._stopping.is_set():
                        continue  # a console's interrupt that came as its piece ended
                    raise
        finally:
            self._stopping.set()
            for listener in self._listeners:
                listener.close()
            for path in (self.path, self._tcp_file):
                if path is not None and os.path.exists(path):
                    os.unlink(path)

    def _run(self, piece: _Piece) -> None:
        with self._running_lock:
            self._running = piece
        result = None
        try:
            with _Capture(piece.client):
                try:
                    result = piece.run()
                except KeyboardInterrupt:
                    traceback.print_exc()  # an interrupt outside the REPL's own handling
                finally:
                    _drain_workers()
        finally:
            with self._running_lock:
                self._running = None
            piece.done.set()
        piece.then(result)

    # -- the consoles' threads ------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        local = listener.family == socket.AF_UNIX
        while not self._stopping.is_set():
            try:
                sock, peer = listener.accept()
            except OSError:
                return  # closed: the job ends
            address = "" if local else str(peer[0])
            if not self._admission.enter(local, address):
                try:
                    sock.setblocking(False)
                    sock.send(b"error: the console is busy with other connections: try again\n")
                except OSError:
                    pass
                sock.close()
                continue
            threading.Thread(target=self._serve_client, args=(sock, local, address),
                             daemon=True, name="crown-console-client").start()

    def _serve_client(self, sock: socket.socket, local: bool, address: str) -> None:
        """One connection: its handshake, then each JSON line it sends (this
        thread is its only reader)."""
        with sock:
            try:
                command, key = self._handshake(sock)
            finally:
                self._admission.leave(local, address)
            if command is None:
                return
            if command == "attach":  # a process that drives the ranks itself (_attach.py)
                _attach_server.serve(sock, key)
                return
            client = Sender(sock)
            if command == "stop":
                client.send(err=f"crown: stopping the served job ({_crown.size()} ranks)\n")
                self.stop()
                client.send(exit=0)
                return
            if command not in ("console", "run"):
                client.send(err=f"crown: no console command {command!r} (console, run, stop, "
                                f"attach)\n",
                            exit=2)
                return
            if command == "console":
                client.send(out=f"crown console: {_crown.size()} ranks, controller pid "
                                f"{os.getpid()}. `procs` is crown.world(); what you define "
                                f"stays for the next console. Ctrl-D detaches, `crown stop` "
                                f"ends the job.\n", prompt=">>> ")
            pending: Optional[_Piece] = None
            try:
                for line in sock.makefile("rb"):
                    message = json.loads(line)
                    if message.get("interrupt"):
                        self._interrupt(pending)
                    elif pending is not None and not pending.done.is_set():
                        continue  # the client waits for its prompt before it sends more
                    elif command == "console" and message.get("reset"):
                        self._repl.resetbuffer()
                        client.send(prompt=">>> ")
                    elif command == "console" and isinstance(message.get("line"), str):
                        pending = self._submit(client, lambda text=message["line"]:
                                               self._push(text),
                                               lambda more: client.send(
                                                   prompt="... " if more else ">>> "))
                    elif command == "run" and pending is None:
                        pending = self._script(client, message)
            except (OSError, ValueError, AttributeError):
                pass  # the client left, or sent what is not a JSON object: its session ends
            # A piece still running runs to its end; what it prints has nowhere to go.

    def _handshake(self, sock: socket.socket) -> Tuple[Optional[str], bytes]:
        """The debug server's check, in Python: the same user, who read the token
        and checks that this server did too (_handshake.py). The command and
        the session key, or (None, b"")."""
        sock.settimeout(_HANDSHAKE_TIMEOUT_S)
        try:
            if sock.family == socket.AF_UNIX:  # over TCP the token alone tells the user
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                        struct.calcsize("3i"))
                _, uid, _ = struct.unpack("3i", creds)
                if uid != os.geteuid():
                    sock.sendall(b"refused: only the job's own user may connect\n")
                    _crown.log("warn", f"console: refused a connection from uid {uid}")
                    return None, b""
            command, key = _handshake.server_session(sock, self._token, CONSOLE_HELLO,
                                                     _HANDSHAKE_TIMEOUT_S)
            sock.settimeout(None)  # an attached console may idle for days
            return command, key
        except OSError:
            return None, b""

    def _submit(self, client: Sender, run, then) -> _Piece:
        piece = _Piece(client, run, then)
        self._pieces.put(piece)
        return piece

    def _interrupt(self, piece: Optional[_Piece]) -> None:
        """Ctrl-C in a console: a SIGINT to the main thread, if it runs that
        console's piece (a KeyboardInterrupt there, as in a terminal)."""
        with self._running_lock:
            if piece is not None and self._running is piece:
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _push(self, line: str) -> bool:
        try:
            return self._repl.push(line)
        except SystemExit:
            self._repl.resetbuffer()  # exit() in a console detaches it; the job lives on
            print("crown: exit() does not end a served job; Ctrl-D detaches this console, "
                  "`crown stop` ends the job", file=sys.stderr)
            return False

    def _script(self, client: Sender, message: dict) -> Optional[_Piece]:
        path, source = message.get("path"), message.get("source")
        if not isinstance(path, str) or not isinstance(source, str):
            client.send(err="crown: a run needs the script's path and source\n", exit=2)
            return None
        argv = [str(arg) for arg in message.get("argv", [])]
        return self._submit(client, lambda: run_script(path, source, argv),
                            lambda exit_code: client.send(exit=exit_code))

    def stop(self) -> None:
        """`crown stop`: the piece running now is interrupted, those queued
        are dropped (their consoles are told), and the job ends."""
        self._stopping.set()
        while True:
            try:
                piece = self._pieces.get_nowait()
            except queue.Empty:
                break
            if piece is not None:
                piece.client.send(err="crown: the job was stopped (crown stop)\n", exit=1)
        self._interrupt(self._running)
        self._pieces.put(None)


def _drain_workers() -> None:
    """What the workers printed while a piece ran reaches its console, and
    its tensor work has run (its errors are its own)."""
    engines = sys.modules.get("crown.tensor._engine")
    if engines is not None:
        engines.finish_all()
    _logs.flush()


def run_script(path: str, source: str, argv) -> int:
    """`crown console --run`: the script as ``python3 path argv...`` would run
    it, in a fresh ``__main__``, inside this job (crown.run(main) just calls
    main). Returns its exit code; the actor meshes it spawned and left
    running are stopped."""
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": builtins}
    saved_argv, saved_path, saved_placement = sys.argv, list(sys.path), _placement.controller
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    before = set(_supervision.owned_by(None))
    exit_code = 0
    try:
        exec(compile(source, path, "exec"), namespace)
    except SystemExit as error:
        exit_code = _exit_codes.exit_code(error)
    except BaseException as error:  # noqa: BLE001 - the script's failure is its console's
        # From the script's own frames on, as `python3 script.py` would show it.
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        exit_code = 130 if isinstance(error, KeyboardInterrupt) else 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        _placement.choose(saved_placement)  # crown.run(main, controller=...) was the script's
        namespace.clear()  # its tensors and meshes are released here, not at the next run
        _stop_left(before)
    return exit_code


def _stop_left(before) -> None:
    for local in set(_supervision.owned_by(None)) - before:
        try:
            _supervision.stop_mesh(local)
        except Exception as error:  # noqa: BLE001 - a mesh that cannot stop is said, not fatal
            print(f"crown: could not stop an actor mesh the script left: {error}",
                  file=sys.stderr)


def serve() -> None:
    """crown.run's main for `crown serve`: serves consoles until `crown stop`."""
    server = ConsoleServer()
    print(f"crown: serving {_crown.size()} ranks (controller pid {os.getpid()}): "
          f"`crown console` attaches, `crown console --run script.py` runs a script here, "
          f"`crown stop` ends the job", file=sys.stderr, flush=True)
    _context.served = True  # scripts' crown.run and crown.shutdown, from here on
    try:
        server.serve_forever()
    finally:
        _context.served = False  # crown.run(serve) ends the job now
