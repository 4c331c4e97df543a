"""``crown debug``: the remote pdb sessions of a running job, as Monarch's
``monarch debug`` offers them (crown/debug/pdb.h).

    list                               the stopped sessions
    attach ACTOR RANK                  talk to one session's pdb; Ctrl-D or
                                       `detach` leaves it stopped
    cast ACTOR ranks(SPEC) CMD         a pdb command to a selection: SPEC is
                                       0,2 | 1:4 | procs=1 | hosts=0,gpus=1:3
    continue                           every session continues
    quit                               leaves, the sessions stay stopped

Each command is one request to the job's debug server (cli.request).
"""

from __future__ import annotations

import cmd
import json
import re
from typing import Callable, Dict, List

from ._jobs import CliError, JobEnded


def _indices(text: str) -> Callable[[int], bool]:
    """"3" or "1:4" or "1:8:2" as a test on an index."""
    if ":" not in text:
        value = int(text)
        return lambda i: i == value
    parts = [int(p) if p else None for p in text.split(":")]
    if len(parts) > 3:
        raise ValueError(text)
    return lambda i: i in range(parts[0] or 0, parts[1] if parts[1] is not None else i + 1,
                                parts[2] if len(parts) > 2 and parts[2] else 1)


def selection(spec: str) -> Callable[[dict], bool]:
    """ranks(SPEC)'s SPEC as a test on a session: member ranks (0,2 | 1:4)
    or coordinates (procs=1 | hosts=0,gpus=1:3)."""
    spec = spec.strip()
    if "=" in spec:
        wanted: Dict[str, Callable[[int], bool]] = {}
        for item in spec.split(","):
            label, _, value = item.partition("=")
            wanted[label.strip()] = _indices(value.strip())

        def matches(session: dict) -> bool:
            coords = dict(pair.split("=") for pair in session["coords"].split(",") if pair)
            return all(label in coords and test(int(coords[label]))
                       for label, test in wanted.items())
        return matches
    tests = [_indices(item.strip()) for item in spec.split(",")]
    return lambda session: any(test(session["member"]) for test in tests)


class DebugShell(cmd.Cmd):
    intro = "crown debug: `help` lists the commands; `quit` leaves the sessions stopped."
    prompt = "crown_dbg> "

    def __init__(self, ask: Callable[[str], bytes]):
        super().__init__()
        self._ask = ask  # one request to the job's debug server

    def _sessions(self) -> List[dict]:
        return json.loads(self._ask("pdb list"))

    def _read(self, session: dict) -> dict:
        return json.loads(self._ask(f"pdb read {session['rank']} {session['session']}"))

    def _send(self, session: dict, line: str) -> None:
        self._ask(f"pdb send {session['rank']} {session['session']} {line}")

    def _settle(self, session: dict) -> dict:
        """Reads until the session is at a prompt again, or ended."""
        read = {"output": "", "waiting": False, "ended": False}
        while not (read["waiting"] or read["ended"]):
            more = self._read(session)
            read = {**more, "output": read["output"] + more["output"]}
        return read

    def onecmd(self, line):
        try:
            return super().onecmd(line)
        except CliError as error:  # the session ended meanwhile, the job is gone: said, not fatal
            print(f"crown: {error}")
            return False

    def emptyline(self):
        return False  # not the last command again

    def default(self, line):
        print(f"no command {line.split()[0]!r}: `help` lists them")

    def do_list(self, arg):
        """list: the stopped sessions."""
        sessions = self._sessions()
        if not sessions:
            print("no session is stopped")
            return
        print(f"{'actor':<16} {'rank':>4} {'coords':<16} {'host':<16} {'function':<20} line")
        for s in sessions:
            print(f"{s['actor']:<16} {s['member']:>4} {s['coords']:<16} {s['host']:<16} "
                  f"{s['function']:<20} {s['line']}" + ("" if s["waiting"] else "  (running)"))

    def _find(self, actor: str) -> List[dict]:
        found = [s for s in self._sessions() if s["actor"] == actor]
        if not found:
            print(f"no session of actor {actor!r} is stopped (`list` shows them)")
        return found

    def do_attach(self, arg):
        """attach ACTOR RANK: talk to that session's pdb; Ctrl-D or `detach` leaves it stopped."""
        words = arg.split()
        if len(words) != 2 or not words[1].isdigit():
            print("attach takes an actor and its rank in its mesh: attach ACTOR RANK")
            return
        sessions = self._find(words[0])
        found = [s for s in sessions if s["member"] == int(words[1])]
        if sessions and not found:
            print(f"no session of {words[0]} rank {words[1]} is stopped")
        if found:
            try:
                self._attached(found[0])
            except KeyboardInterrupt:
                print("\n(detached while it runs: `list` shows it once it stops again)")

    def _attached(self, session: dict) -> None:
        try:
            self._converse(session)
        except JobEnded as ended:  # the last command let the program run to its end
            print(f"(the session continued)\ncrown: {ended}")

    def _converse(self, session: dict) -> None:
        read = self._settle(session)
        while True:
            *shown, prompt = read["output"].split("\n")
            prompt = prompt or ("" if read["ended"] else "(Pdb) ")  # re-attached: said already
            if shown:
                print("\n".join(shown))
            if read["ended"]:
                print(prompt + ("\n" if prompt else "") + "(the session continued)")
                return
            try:
                line = input(prompt)
            except EOFError:
                print("\n(detached: the session stays stopped)")
                return
            if line.strip() == "detach":
                print("(detached: the session stays stopped)")
                return
            self._send(session, line)
            read = self._settle(session)

    def do_cast(self, arg):
        """cast ACTOR ranks(SPEC) CMD: CMD to the selected sessions
        (SPEC: 0,2 | 1:4 | procs=1 | hosts=0,gpus=1:3)."""
        match = re.fullmatch(r"\s*(\S+)\s+ranks\(([^)]*)\)\s+(.+)", arg)
        if not match:
            print("cast takes an actor, a selection and a pdb command: cast ACTOR ranks(0,2) p x")
            return
        actor, spec, command = match.groups()
        try:
            chosen = selection(spec)
        except ValueError:
            print(f"ranks({spec}): a selection is 0,2 or 1:4 or procs=1")
            return
        targets = [s for s in self._find(actor) if chosen(s) and s["waiting"]]
        if not targets:
            print(f"no session of {actor} in ranks({spec}) is at a prompt")
            return
        self._to_each(targets, command)

    def _to_each(self, targets: List[dict], command: str) -> None:
        """Sends command to each and prints what it answered, without the
        prompt (nor what the session said before, left unread)."""
        for session in targets:
            self._read(session)
            self._send(session, command)
        for session in targets:
            read = self._settle(session)
            output = read["output"].rsplit("\n", 1)[0] if not read["ended"] else read["output"]
            for line in output.splitlines() or [""]:
                print(f"[{session['actor']} {session['member']}] {line}")

    def do_continue(self, arg):
        """continue: every stopped session continues."""
        targets = [s for s in self._sessions() if s["waiting"]]
        if not targets:
            print("no session is stopped")
            return
        self._to_each(targets, "continue")

    def do_quit(self, arg):
        """quit: leave crown debug; the sessions stay stopped."""
        return True

    def do_EOF(self, arg):
        print()
        return True
