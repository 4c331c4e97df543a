"""python_soak: a long run of mixed small messages from the controller to a
4-rank mesh (one actor per rank, rank 0's beside the controller):
SOAK_MESSAGES (10^6) sends, each at random one of

  - call_one to one member (direct; its reply checked),
  - broadcast to every member (a cast, one-way),
  - call to every member (a cast; each member's reply checked),

with up to IN_FLIGHT requests outstanding. Every message carries the
controller's sequence number; each actor checks, per sender, that the
numbers it handles only grow (ORD-1, direct and cast sends interleaved) and
counts them. At the end each actor's count must equal what was sent to it
(nothing lost) with no number out of order. The resident set (RSS, from
/proc/self/statm) of every rank is sampled 50 times over the run; after a
warm-up of the first WARMUP_FRACTION of the messages it must stay within
RSS_BOUND of its value then (growth < 5 %). Prints messages/s (sends, and
deliveries: a cast to 4 is 4), the rate per tenth of the run, and the RSS
table; writes bench/results/python_soak.json (or argv[1], or
$CROWN_BENCH_RESULTS). Exit code 1 when a check fails.

  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONPATH=build/python \\
    mpirun --oversubscribe -n 4 -x PYTHONPATH /usr/bin/python3 bench/python_soak.py
"""

import os
import platform
import random
import sys
import time

import crown
from bench_env import write_results
from crown.actor import Actor, current_rank, endpoint

BENCH = "python_soak"
MESSAGES = int(os.environ.get("SOAK_MESSAGES", "1000000"))
IN_FLIGHT = 128
SAMPLES = 50
WARMUP_FRACTION = 0.1
RSS_BOUND = 0.05
MIX = [("call_one", 50), ("broadcast", 30), ("call", 20)]
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


class Member(Actor):
    def __init__(self):
        self.rank = current_rank().rank
        self.last = {}  # sender -> the last sequence number handled from it
        self.handled = 0
        self.out_of_order = 0

    def _take(self, sender, seq):
        if seq <= self.last.get(sender, -1):
            self.out_of_order += 1
        self.last[sender] = seq
        self.handled += 1

    @endpoint
    def ask(self, sender, seq):
        self._take(sender, seq)
        return self.rank, seq

    @endpoint
    def tell(self, sender, seq):  # broadcast
        self._take(sender, seq)

    @endpoint
    def rss(self):
        return rss_bytes()

    @endpoint
    def report(self):
        return self.handled, self.out_of_order


def main():
    mesh = crown.world_flat().spawn("soak", Member)
    ranks = len(mesh)
    members = [mesh.slice(ranks=rank) for rank in range(ranks)]
    rng = random.Random(7)
    kinds = rng.choices([k for k, _ in MIX], [w for _, w in MIX], k=MESSAGES)
    sent = [0] * ranks  # messages addressed to each member
    counts = dict.fromkeys((k for k, _ in MIX), 0)
    wrong = 0
    pending = []
    samples = []  # (messages sent, seconds, [RSS of each rank])
    marks = []  # (messages sent, seconds), each tenth of the run

    def settle(entry):
        nonlocal wrong
        kind, seq, target, future = entry
        if kind == "call_one":
            wrong += future.get(timeout=60) != (target, seq)
        else:
            wrong += future.get(timeout=60).values() != [(r, seq) for r in range(ranks)]

    def sample(n):
        samples.append((n, time.monotonic() - start, mesh.rss.call().get(timeout=60).values()))

    start = time.monotonic()
    sample(0)
    for seq, kind in enumerate(kinds):
        counts[kind] += 1
        if kind == "call_one":
            target = rng.randrange(ranks)
            pending.append((kind, seq, target, members[target].ask.call_one("controller", seq)))
            sent[target] += 1
        else:
            if kind == "broadcast":
                mesh.tell.broadcast("controller", seq)
            else:
                pending.append((kind, seq, None, mesh.ask.call("controller", seq)))
            for rank in range(ranks):
                sent[rank] += 1
        if len(pending) > IN_FLIGHT:
            settle(pending.pop(0))
        n = seq + 1
        if n % (MESSAGES // SAMPLES) == 0:
            sample(n)
        if n % (MESSAGES // 10) == 0:
            marks.append((n, time.monotonic() - start))
            print(f"{n:,} sent after {marks[-1][1]:.1f} s", flush=True)
    for entry in pending:
        settle(entry)
    elapsed = time.monotonic() - start
    reports = mesh.report.call().get(timeout=120).values()

    lost = [sent[r] - reports[r][0] for r in range(ranks)]
    reordered = [reports[r][1] for r in range(ranks)]
    deliveries = sum(sent)
    warm = next(s for s in samples if s[0] >= MESSAGES * WARMUP_FRACTION)
    after = [s for s in samples if s[0] >= warm[0]]
    growth = [max(s[2][r] for s in after) / warm[2][r] - 1 for r in range(ranks)]
    rates = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in zip([(0, 0.0)] + marks, marks)]

    print(f"{MESSAGES:,} messages ({', '.join(f'{k} {counts[k]:,}' for k, _ in MIX)}) from "
          f"the controller to {ranks} members in {elapsed:.1f} s: {MESSAGES / elapsed:,.0f} "
          f"messages/s, {deliveries / elapsed:,.0f} deliveries/s ({deliveries:,} in all)")
    print("messages/s per tenth of the run: " + " ".join(f"{r:,.0f}" for r in rates))
    print(f"lost per member: {lost}; out of order per member: {reordered}; wrong replies: {wrong}")
    print(f"RSS MiB (start, after warm-up at {warm[0]:,}, max after it, end; growth after "
          f"warm-up, bound {RSS_BOUND:.0%}):")
    for r in range(ranks):
        series = [s[2][r] / 2**20 for s in samples]
        print(f"  rank {r}: {series[0]:7.1f} {warm[2][r] / 2**20:7.1f} "
              f"{max(s[2][r] for s in after) / 2**20:7.1f} {series[-1]:7.1f}   "
              f"{growth[r]:+.2%}")
    ok = not any(lost) and not any(reordered) and not wrong and max(growth) < RSS_BOUND
    result = {
        "bench": BENCH, "host": platform.node(), "ranks": ranks, "messages": MESSAGES,
        "mix": counts, "deliveries": deliveries, "seconds": elapsed,
        "messages_per_s": MESSAGES / elapsed, "deliveries_per_s": deliveries / elapsed,
        "messages_per_s_by_tenth": rates, "lost": lost, "out_of_order": reordered,
        "wrong_replies": wrong, "rss_bound": RSS_BOUND, "rss_growth_after_warmup": growth,
        "rss_samples": [{"messages": n, "seconds": t, "rss_bytes": rss} for n, t, rss in samples],
        "ok": ok,
    }
    write_results(BENCH, result)
    print(f"python_soak: {'PASS' if ok else 'FAIL'} (zero lost, zero reordered, RSS flat "
          f"within {RSS_BOUND:.0%} after warm-up)")
    if not ok:
        sys.exit(1)


crown.run(main)
