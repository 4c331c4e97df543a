"""Chaos (DLV-1, ORD-1 under kills): from the controller of an 8-rank job,
CHAOS_OPS (10^5) mixed calls and casts -- call_one, choose, call, stream,
broadcast -- to one mesh over every rank, while KILLS (3) random workers
(never rank 0) are SIGKILLed at random moments with calls in flight.

    OMPI_MCA_orte_enable_recovery=1 mpirun --oversubscribe -n 8 -x OMPI_MCA_orte_enable_recovery \
        -x PYTHONPATH python3 python/tests/chaos.py

CHAOS_SEED fixes the run (it is printed first; the kill moments and the mix
follow from it). What is checked, each a FAIL line:
- every call ends, with a value or a typed error (ActorError where the
  endpoint raised on purpose, SupervisionError naming a rank that was
  killed): get(timeout=...) never times out, and no other error appears;
- no value is wrong: each reply is (rank, id, f(x, rank)), checked against
  the call's own arguments and the rank it was meant for;
- no message is handled twice, nor out of order: each actor records the ids
  it handled; at the end the survivors report them, and each list must be
  strictly increasing (one sender: ORD-1), hold only ids sent to that rank,
  and hold every id whose call returned a value (or raised ActorError) from
  that rank; every broadcast reached every survivor once, except what the
  fault hook was told was lost (MessagesLost);
- the controller's fault hook hears of one member death per killed rank
  (a lost process is a supervision event) and of no other, and main
  returns, so the job exits 0.
The last line is "chaos: PASS" with the counts, or "chaos: FAIL".
"""

import faulthandler
import os
import random
import signal
import sys
import threading
import time
from collections import Counter

import crown
import crown.actor
from crown.actor import Actor, ActorError, SupervisionError, current_rank, endpoint

RANKS = 8
OPS = int(os.environ.get("CHAOS_OPS", "100000"))
KILLS = 3
IN_FLIGHT = 64  # requests outstanding before the oldest is waited for
TIMEOUT_S = 30.0  # a get() that waits this long is a hang (DLV-1)
RAISE_EVERY = 97  # an x divisible by it makes the endpoint raise ValueError
MIX = [("call_one", 35), ("choose", 15), ("call", 15), ("stream", 10), ("broadcast", 25)]


def f(x, rank):
    return (x * 2654435761 + rank * 40503) % (1 << 61)


class Worker(Actor):
    def __init__(self):
        self.rank = current_rank().rank
        self.handled = []  # message ids, in the order handled

    @endpoint
    def pid(self):
        return os.getpid()

    @endpoint
    def work(self, mid, x):
        self.handled.append(mid)
        if x % RAISE_EVERY == 0:
            raise ValueError(f"refused x={x} on purpose")
        return self.rank, mid, f(x, self.rank)

    @endpoint
    def note(self, mid):  # broadcast: no reply
        self.handled.append(mid)

    @endpoint
    def report(self):
        return self.handled


class Chaos:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.workers = crown.world_flat().spawn("chaos", Worker)
        self.pids = self.workers.pid.call().get(timeout=60).values()
        self.killed = {}  # rank -> op index of its kill
        victims = self.rng.sample(range(1, RANKS), KILLS)
        moments = sorted(self.rng.sample(range(OPS // 20, OPS * 4 // 5), KILLS))
        self.kill_at = dict(zip(moments, victims))
        self.sent = {rank: set() for rank in range(RANKS)}  # ids addressed to each rank
        self.broadcasts = []
        self.answered = {rank: set() for rank in range(RANKS)}  # ids a rank replied to
        self.ok = Counter()  # member replies with a value, by adverb
        self.failed = Counter()  # member replies with an error, by (adverb, type)
        self.calls = Counter()  # whole calls: "ok" or the type get() raised
        self.problems = []
        self.lost_reports = []  # (rank, count) from MessagesLost
        self.deaths = []  # MeshFailure: one per killed rank
        self.hook_lock = threading.Lock()

    def problem(self, text):
        if len(self.problems) < 20:
            print(f"chaos: FAIL: {text}", flush=True)
        self.problems.append(text)

    def hook(self, failure):
        with self.hook_lock:
            if isinstance(failure, crown.actor.MessagesLost):
                self.lost_reports.append((failure.rank, failure.count))
            else:
                self.deaths.append(failure)

    # -- outcomes ----------------------------------------------------------

    def check_value(self, kind, mid, x, value, target=None):
        rank, got_mid, fx = value
        if got_mid != mid or fx != f(x, rank) or not 0 <= rank < RANKS or (
                target is not None and rank != target):
            self.problem(f"{kind} {mid}: wrong value {value!r} (x={x}, target={target})")
            return
        if x % RAISE_EVERY == 0:
            self.problem(f"{kind} {mid}: a value where the endpoint raises: {value!r}")
        if mid in self.answered[rank]:
            self.problem(f"{kind} {mid}: rank {rank} answered twice")
        self.answered[rank].add(mid)
        self.ok[kind] += 1

    def check_error(self, kind, mid, x, error, target=None):
        """An error of one member's call: typed, and explained."""
        if isinstance(error, SupervisionError):
            # The process lost: the member's own, or a cast hop on its way.
            lost = getattr(error, "lost_rank", None)
            lost = error.rank if lost is None else lost
            if lost not in self.killed:
                self.problem(f"{kind} {mid}: SupervisionError naming rank {lost}, "
                             f"never killed: {error}")
            elif target is not None and error.rank != target:
                self.problem(f"{kind} {mid}: SupervisionError for rank {error.rank}, "
                             f"sent to {target}")
            self.failed[(kind, "SupervisionError")] += 1
        elif isinstance(error, ActorError):
            if x % RAISE_EVERY != 0 or "refused x=" not in str(error):
                self.problem(f"{kind} {mid}: unexpected ActorError: {error}")
            elif target is not None and error.rank != target:
                self.problem(f"{kind} {mid}: ActorError from rank {error.rank}, sent to {target}")
            else:
                self.answered[error.rank].add(mid)  # it ran there: handled once
            self.failed[(kind, "ActorError")] += 1
        elif isinstance(error, TimeoutError):
            self.problem(f"{kind} {mid}: no outcome within {TIMEOUT_S} s (a hang): {error}")
            self.failed[(kind, "TimeoutError")] += 1
        else:
            self.problem(f"{kind} {mid}: untyped error {type(error).__name__}: {error}")
            self.failed[(kind, type(error).__name__)] += 1

    def settle(self, entry):
        before = Counter(self.failed)
        self._settle(entry)
        new = self.failed - before
        if not new:
            self.calls["ok"] += 1
        else:  # as call().get() would: a SupervisionError first
            types = {error for _, error in new}
            self.calls["SupervisionError" if "SupervisionError" in types else min(types)] += 1

    def _settle(self, entry):
        kind, mid, x, target, future = entry
        if kind in ("call_one", "choose"):
            try:
                value = future.get(timeout=TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - every error is checked
                self.check_error(kind, mid, x, e, target)
            else:
                self.check_value(kind, mid, x, value, target)
        elif kind == "call":
            try:
                future.get(timeout=TIMEOUT_S)
                raised = None
            except (SupervisionError, ActorError) as e:
                raised = e
            except Exception as e:  # noqa: BLE001
                self.check_error(kind, mid, x, e)
                return
            mesh = future.value_mesh(timeout=TIMEOUT_S)
            errors = dict(mesh.errors())
            if bool(errors) != (raised is not None):
                self.problem(f"call {mid}: get() raised {raised!r} but errors() is {errors}")
            for rank, value, error in mesh._entries:
                if error is not None:
                    self.check_error(kind, mid, x, error, rank)
                else:
                    self.check_value(kind, mid, x, value, rank)
        elif kind == "stream":
            # Each member answers once, with a value or an error naming it
            # (a member cut off by a dead cast hop: .rank is the member's,
            # .lost_rank the hop's).
            ranks = []
            for reply in future:
                try:
                    value = reply.get(timeout=TIMEOUT_S)
                except Exception as e:  # noqa: BLE001
                    self.check_error(kind, mid, x, e)
                    ranks.append(getattr(e, "rank", None))
                else:
                    self.check_value(kind, mid, x, value)
                    ranks.append(value[0])
            if sorted(ranks, key=str) != sorted(range(RANKS), key=str):
                self.problem(f"stream {mid}: outcomes from ranks {sorted(ranks, key=str)}, "
                             f"for members {list(range(RANKS))}")

    # -- the run -----------------------------------------------------------

    def run(self):
        kinds = [k for k, _ in MIX]
        weights = [w for _, w in MIX]
        pending = []
        start = time.monotonic()
        for mid in range(OPS):
            victim = self.kill_at.get(mid)
            if victim is not None:
                os.kill(self.pids[victim], signal.SIGKILL)
                self.killed[victim] = mid
                print(f"chaos: killed rank {victim} at op {mid} "
                      f"({len(pending)} requests in flight)", flush=True)
            kind = self.rng.choices(kinds, weights)[0]
            x = self.rng.randrange(1 << 30)
            target = None
            if kind == "call_one":
                target = self.rng.randrange(RANKS)
                future = self.workers.slice(ranks=target).work.call_one(mid, x)
                self.sent[target].add(mid)
            elif kind == "choose":
                future = self.workers.work.choose(mid, x)
            elif kind == "call":
                future = self.workers.work.call(mid, x)
            elif kind == "stream":
                future = self.workers.work.stream(mid, x)
            else:
                self.workers.note.broadcast(mid)
                self.broadcasts.append(mid)
                future = None
            if kind != "call_one":
                for rank in range(RANKS):
                    self.sent[rank].add(mid)
            if future is not None:
                pending.append((kind, mid, x, target, future))
                if len(pending) > IN_FLIGHT:
                    self.settle(pending.pop(0))
        for entry in pending:
            self.settle(entry)
        elapsed = time.monotonic() - start
        self.audit()
        return elapsed

    def audit(self):
        survivors = [rank for rank in range(RANKS) if rank not in self.killed]
        lost = Counter()
        for rank, count in self.lost_reports:
            lost[rank] += count
        broadcasts = set(self.broadcasts)
        self.missed = {}
        for rank in survivors:
            handled = self.workers.slice(ranks=rank).report.call_one().get(timeout=120)
            seen = set(handled)
            if len(seen) != len(handled):
                repeats = [m for m, n in Counter(handled).items() if n > 1]
                self.problem(f"rank {rank} handled {len(repeats)} messages twice: {repeats[:5]}")
            disorder = sum(1 for a, b in zip(handled, handled[1:]) if b <= a)
            if disorder:
                self.problem(f"rank {rank}: {disorder} messages handled out of send order (ORD-1)")
            stray = seen - self.sent[rank]
            if stray:
                self.problem(f"rank {rank} handled ids never sent to it: {sorted(stray)[:5]}")
            unrecorded = self.answered[rank] - seen
            if unrecorded:
                self.problem(f"rank {rank} answered {len(unrecorded)} calls it has no record "
                             f"of: {sorted(unrecorded)[:5]}")
            missed = len(broadcasts - seen)
            self.missed[rank] = missed
            if missed > lost[rank]:
                self.problem(f"rank {rank} missed {missed} broadcasts; MessagesLost reported "
                             f"{lost[rank]}")
        # Each killed process is one supervision event of the mesh (Monarch's),
        # and nothing else died: the members the survivors host live on.
        deaths = sorted(death.rank for death in self.deaths)
        if deaths != sorted(self.killed) or any(
                "process was lost" not in death.cause for death in self.deaths):
            self.problem(f"the fault hook heard of member deaths on ranks {deaths}, where "
                         f"ranks {sorted(self.killed)} were killed: {self.deaths[:3]}")
        if len(self.killed) != KILLS:
            self.problem(f"killed {len(self.killed)} ranks, meant {KILLS}")


def main():
    seed = int(os.environ.get("CHAOS_SEED", str(int.from_bytes(os.urandom(4), "little"))))
    print(f"chaos: seed {seed}, {OPS} ops on {RANKS} ranks, {KILLS} kills", flush=True)
    # A hang outside get(timeout=...) (a send that never returns): the stacks, then the
    # job's own timeout ends it.
    faulthandler.dump_traceback_later(float(os.environ.get("CHAOS_WATCHDOG_S", "150")), exit=False)
    chaos = Chaos(seed)
    crown.actor.unhandled_fault_hook = chaos.hook
    elapsed = chaos.run()
    calls = sum(chaos.calls.values())
    failed = {error: n for error, n in chaos.calls.items() if error != "ok"}
    print(f"chaos: {OPS} ops in {elapsed:.1f} s ({OPS / elapsed:,.0f} ops/s): {calls} calls "
          f"awaited, {len(chaos.broadcasts)} broadcasts", flush=True)
    print(f"chaos: calls ok {chaos.calls['ok']}, failed by type: " + (", ".join(
        f"{error} {n}" for error, n in sorted(failed.items())) or "none"), flush=True)
    print("chaos: member replies ok by adverb: " + ", ".join(
        f"{k} {chaos.ok[k]}" for k, _ in MIX if k != "broadcast"), flush=True)
    print("chaos: member replies failed by adverb and type: " + (", ".join(
        f"{kind}/{error} {n}" for (kind, error), n in sorted(chaos.failed.items())) or "none"),
        flush=True)
    print(f"chaos: kills {len(chaos.killed)} (rank at op: "
          f"{', '.join(f'{r}@{m}' for r, m in sorted(chaos.killed.items(), key=lambda i: i[1]))})"
          f"; broadcasts missed by survivors {sum(chaos.missed.values())}, reported lost "
          f"{sum(n for _, n in chaos.lost_reports)}", flush=True)
    if chaos.problems:
        print(f"chaos: FAIL ({len(chaos.problems)} problems, seed {seed})", flush=True)
        sys.exit(1)
    print(f"chaos: PASS ({chaos.calls['ok']} calls ok, {sum(failed.values())} failed with typed "
          f"errors, {len(chaos.killed)} kills; no hang, no wrong value, nothing handled twice)",
          flush=True)


crown.run(main)
