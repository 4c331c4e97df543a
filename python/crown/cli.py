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
file beside it whose HMAC proves the client read it (or, from another node,
a TCP port: _jobs.py). The server runs on a thread of its own, so it
answers while the controller's program is blocked.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from ._jobs import CliError, Job, choose, jobs, request
from ._stacks import RankStacks, Stacks


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


STATUS_FIELDS = ("pid", "rss", "actors", "queued", "inflight", "handled", "heard")


def parse_status(answer: bytes) -> List[dict]:
    """One dict a rank: rank, state (alive, stopped at a pdb prompt, lost,
    silent), host, heard (ms since the controller last heard from it; absent
    for the controller and a rank with no link), and for a live rank pid, rss
    (bytes), actors, queued, inflight, handled; for a silent one, error."""
    rows = []
    for line in answer.decode("utf-8", "replace").splitlines():
        if line == "end":
            return rows
        words = line.split(" ")
        row = {"rank": int(words[1]), "state": words[3], "host": words[5]}
        at = 6
        while at + 1 < len(words):  # "name value" pairs; an error is the rest of the line
            if words[at] == "error":
                row["error"] = " ".join(words[at + 1:])
                break
            row[words[at]] = int(words[at + 1])
            at += 2
        rows.append(row)
    raise CliError("the job's status ended early")


def status_table(rows: List[dict]) -> str:
    def heard(row: dict) -> str:  # "0.4 s"; "-" for the controller, or a rank with no link
        return f"{row['heard'] / 1000:.1f} s" if "heard" in row else "-"

    head = f"{'rank':>5} {'host':<16} {'pid':>8} {'state':<7} {'heard':>7} {'actors':>6} " \
           f"{'queued':>7} {'in flight':>9} {'handled':>10} {'RSS MiB':>8}"
    lines = [head]
    for row in rows:
        if row["state"] in ("alive", "stopped"):  # stopped: at a pdb prompt
            lines.append(f"{row['rank']:>5} {row['host']:<16} {row['pid']:>8} {row['state']:<7} "
                         f"{heard(row):>7} {row['actors']:>6} {row['queued']:>7} "
                         f"{row['inflight']:>9} {row['handled']:>10} {row['rss'] / 2**20:>8.1f}")
        else:
            why = f"  {row['error']}" if row.get("error") else ""
            lines.append(f"{row['rank']:>5} {row['host']:<16} {'-':>8} {row['state']:<7} "
                         f"{heard(row):>7}{why}")
    return "\n".join(lines)


def live_status(job: Job, timeout: float) -> None:
    """The status table, refreshed each second until q (or Ctrl-C)."""
    import curses

    def draw(screen):
        screen.nodelay(True)
        while True:
            rows = parse_status(request(job, "status", timeout))
            screen.erase()
            screen.addstr(0, 0, f"crown status: job {job.pid}  (q quits)")
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

            job = choose(args.job)
            if args.command == "stop":
                return _console_cli.stop(job, args.timeout)
            if args.run is None:
                if args.script_args:
                    raise CliError(f"unexpected arguments {args.script_args}: say --run SCRIPT")
                return _console_cli.attach(job)
            return _console_cli.run(job, args.run, args.script_args)
        if args.command == "jobs":
            for job in jobs():
                print(f"{job.pid}\t{job.debug_address()}")
            return 0
        job = choose(args.job)
        if args.command == "status":
            if args.json or args.once or not sys.stdout.isatty():
                rows = parse_status(request(job, "status", args.timeout))
                print(json.dumps(rows, indent=1) if args.json else status_table(rows))
            else:
                live_status(job, args.timeout)
            return 0
        if args.command == "debug":
            from ._debug_cli import DebugShell

            request(job, "ping", 5.0)  # the job is there before the shell starts
            DebugShell(lambda command: request(job, command, 10.0)).cmdloop()
            return 0
        replies = parse_stacks(request(job, "stacks native" if args.native else "stacks",
                                       args.timeout))
        if args.json:
            print(json.dumps([reply._asdict() for reply in replies], indent=1))
        else:
            print(Stacks(replies))
        return 0
    except CliError as error:
        print(f"crown: {error}", file=sys.stderr)
        return 1
