"""crown's command line, for a job that runs (issue 15):

    crown jobs                                   this user's jobs on this host
    crown stacks [--job PID] [--native] [--json] every thread of every rank
    crown status [--job PID] [--json | --once]   a row per rank, live (q quits)
    crown debug [--job PID]                      remote pdb sessions (_debug_cli.py)
    crown console [--job PID] [--run SCRIPT ARGS] a served job's REPL (_console_cli.py)
    crown stop [--job PID]                       ends a served job
    crown serve                                  what `crownrun --serve` runs on every rank

It reaches the job's debug server (crown/debug/server.h) on the controller's
host: a Unix socket in a directory only this user may enter, and a token
file beside it whose HMAC proves the client read it. The server runs on a
thread of its own, so it answers while the controller's program is blocked.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import hmac
import json
import os
import re
import socket
import sys
from typing import List, Optional, Tuple

from ._stacks import RankStacks, Stacks


class CliError(Exception):
    """What the user is told, with exit code 1."""


def debug_directory() -> str:
    """Where the jobs' servers listen (as debugDirectory() in C++)."""
    if os.environ.get("CROWN_DEBUG_DIR"):
        return os.environ["CROWN_DEBUG_DIR"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "crown")
    return f"/tmp/crown-{os.geteuid()}"


def jobs() -> List[Tuple[int, str]]:
    """(controller pid, socket) of each job whose controller lives on this host."""
    found = []
    directory = debug_directory()
    if os.path.isdir(directory) and not os.access(directory, os.R_OK | os.X_OK):
        raise CliError(f"cannot look in {directory}: only its owner may (a job's debug server "
                       f"is private to the user who started the job)")
    for path in sorted(glob.glob(os.path.join(directory, "job-*.sock"))):
        pid = int(re.search(r"job-(\d+)\.sock$", path).group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue  # a job that ended without removing its socket (killed)
        except PermissionError:
            pass
        found.append((pid, path))
    return found


def choose(job: Optional[int]) -> str:
    running = jobs()
    if job is not None:
        for pid, path in running:
            if pid == job:
                return path
        raise CliError(f"no crown job with controller pid {job} on this host "
                       f"(in {debug_directory()}); `crown jobs` lists them")
    if not running:
        raise CliError(f"no crown job of this user runs on this host (looked in "
                       f"{debug_directory()}); run this on the controller's (rank 0's) host")
    if len(running) > 1:
        raise CliError("several crown jobs run here; pick one with --job PID:\n" +
                       "\n".join(f"  {pid}" for pid, _ in running))
    return running[0][1]


def token_path(path: str) -> str:
    """The job's token file, beside its debug socket (job-PID.token)."""
    return re.sub(r"\.(sock|console)$", "", path) + ".token"


def connect(path: str, command: str, timeout: float, hello: str = "crown-debug") -> socket.socket:
    """A socket to a job's server (debug or console) that has proved the
    token and sent `command`; its answer is left to read."""
    try:
        with open(token_path(path)) as f:
            token = bytes.fromhex(f.read().strip())
    except OSError as error:
        raise CliError(f"cannot read the job's token {token_path(path)}: {error}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as error:
            raise CliError(f"cannot reach the job's server at {path}: {error}") from None
        greeting = b""
        while not greeting.endswith(b"\n") and len(greeting) < 256:
            got = sock.recv(1)
            if not got:
                break
            greeting += got
        words = greeting.decode("ascii", "replace").split()
        if len(words) != 3 or words[:2] != [hello, "1"]:
            raise CliError(f"the server at {path} said {greeting.decode('utf-8', 'replace')!r}")
        proof = hmac.new(token, bytes.fromhex(words[2]), hashlib.sha256).hexdigest()
        sock.sendall(f"{proof} {command}\n".encode("utf-8"))  # a pdb line may be any text
        return sock
    except BaseException:
        sock.close()
        raise


def request(path: str, command: str, timeout: float) -> bytes:
    """Proves the token, sends `command`, returns the whole answer."""
    with connect(path, command, timeout) as sock:
        answer = sock.makefile("rb").read()
    if answer.startswith(b"refused: ") or answer.startswith(b"error: "):
        raise CliError(answer.decode("utf-8", "replace").strip())
    return answer


def parse_stacks(answer: bytes) -> List[RankStacks]:
    replies, at = [], 0
    while True:
        end = answer.index(b"\n", at)
        header = answer[at:end].decode("ascii").split()
        at = end + 1
        if header == ["end"]:
            return replies
        fields = dict(zip(header[0::2], header[1::2]))
        parts = []
        for name in ("host", "python", "native", "error"):
            size = int(fields[f"{name}-bytes"])
            parts.append(answer[at:at + size].decode("utf-8", "replace"))
            at += size
        replies.append(RankStacks(int(fields["rank"]), parts[0], int(fields["pid"]), parts[1],
                                  parts[2], parts[3]))


STATUS_FIELDS = ("pid", "rss", "actors", "queued", "inflight", "handled")


def parse_status(answer: bytes) -> List[dict]:
    """One dict a rank: rank, state (alive, stopped at a pdb prompt, lost,
    silent), host, and for a live rank pid, rss (bytes), actors, queued,
    inflight, handled; for a silent one, error."""
    rows = []
    for line in answer.decode("utf-8", "replace").splitlines():
        if line == "end":
            return rows
        words = line.split(" ")
        row = {"rank": int(words[1]), "state": words[3], "host": words[5]}
        if len(words) > 6 and words[6] == "error":
            row["error"] = " ".join(words[7:])
        else:
            for name, value in zip(words[6::2], words[7::2]):
                row[name] = int(value)
        rows.append(row)
    raise CliError("the job's status ended early")


def status_table(rows: List[dict]) -> str:
    head = f"{'rank':>5} {'host':<16} {'pid':>8} {'state':<7} {'actors':>6} {'queued':>7} " \
           f"{'in flight':>9} {'handled':>10} {'RSS MiB':>8}"
    lines = [head]
    for row in rows:
        if row["state"] in ("alive", "stopped"):  # stopped: at a pdb prompt
            lines.append(f"{row['rank']:>5} {row['host']:<16} {row['pid']:>8} {row['state']:<7} "
                         f"{row['actors']:>6} {row['queued']:>7} {row['inflight']:>9} "
                         f"{row['handled']:>10} {row['rss'] / 2**20:>8.1f}")
        else:
            why = f"  {row['error']}" if row.get("error") else ""
            lines.append(f"{row['rank']:>5} {row['host']:<16} {'-':>8} {row['state']:<7}{why}")
    return "\n".join(lines)


def live_status(path: str, timeout: float) -> None:
    """The status table, refreshed each second until q (or Ctrl-C)."""
    import curses

    def draw(screen):
        screen.nodelay(True)
        while True:
            rows = parse_status(request(path, "status", timeout))
            screen.erase()
            screen.addstr(0, 0, f"crown status: {path}  (q quits)")
            for i, line in enumerate(status_table(rows).splitlines()):
                if i + 2 < curses.LINES:
                    screen.addstr(i + 2, 0, line[:curses.COLS - 1])
            screen.refresh()
            for _ in range(10):
                if screen.getch() in (ord("q"), ord("Q")):
                    return
                curses.napms(100)

    try:
        curses.wrapper(draw)
    except KeyboardInterrupt:
        pass


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="crown", description="Look inside a running crown job.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("jobs", help="this user's crown jobs whose controller runs on this host")
    stacks = commands.add_parser("stacks", help="every thread of every rank, merged")
    stacks.add_argument("--job", type=int, help="the controller's pid (see `crown jobs`)")
    stacks.add_argument("--native", action="store_true", help="also native frames (eu-stack)")
    stacks.add_argument("--json", action="store_true", help="each rank's stacks as JSON")
    stacks.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the job")
    status = commands.add_parser("status", help="a row per rank, refreshed each second")
    status.add_argument("--job", type=int, help="the controller's pid (see `crown jobs`)")
    shown = status.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="once, as JSON")
    shown.add_argument("--once", action="store_true", help="once, as a table")
    status.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the job")
    debug = commands.add_parser("debug", help="the job's stopped pdb sessions (breakpoint())")
    debug.add_argument("--job", type=int, help="the controller's pid (see `crown jobs`)")
    console = commands.add_parser("console", help="a Python REPL in a served job "
                                  "(crownrun --serve), or --run a script there")
    console.add_argument("--job", type=int, help="the controller's pid (see `crown jobs`)")
    console.add_argument("--run", metavar="SCRIPT", help="run SCRIPT in the job and exit with "
                         "its exit code (the arguments after it are its own)")
    console.add_argument("script_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    stop = commands.add_parser("stop", help="end a served job (crownrun --serve)")
    stop.add_argument("--job", type=int, help="the controller's pid (see `crown jobs`)")
    stop.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the end")
    commands.add_parser("serve", help="serve consoles until `crown stop` (crownrun --serve runs "
                        "this on every rank)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        import crown
        from . import _console

        crown.run(_console.serve)  # every rank; rank 0 serves the consoles
    try:
        if args.command in ("console", "stop"):
            from . import _console_cli

            path = choose(args.job)
            console_socket = _console_cli.console_path(path)
            if args.command == "stop":
                return _console_cli.stop(console_socket, _console_cli.pid_of(path), args.timeout)
            if args.run is None:
                if args.script_args:
                    raise CliError(f"unexpected arguments {args.script_args}: say --run SCRIPT")
                return _console_cli.attach(console_socket)
            return _console_cli.run(console_socket, args.run, args.script_args)
        if args.command == "jobs":
            for pid, path in jobs():
                print(f"{pid}\t{path}")
            return 0
        if args.command == "status":
            path = choose(args.job)
            if args.json or args.once or not sys.stdout.isatty():
                rows = parse_status(request(path, "status", args.timeout))
                print(json.dumps(rows, indent=1) if args.json else status_table(rows))
            else:
                live_status(path, args.timeout)
            return 0
        if args.command == "debug":
            from ._debug_cli import DebugShell

            path = choose(args.job)
            request(path, "ping", 5.0)  # the job is there before the shell starts
            DebugShell(lambda command: request(path, command, 10.0)).cmdloop()
            return 0
        path = choose(args.job)
        replies = parse_stacks(request(path, "stacks native" if args.native else "stacks",
                                       args.timeout))
        if args.json:
            print(json.dumps([reply._asdict() for reply in replies], indent=1))
        else:
            print(Stacks(replies))
        return 0
    except CliError as error:
        print(f"crown: {error}", file=sys.stderr)
        return 1
