"""The merging of procs.stacks() replies (crown/_stacks.py), in one process:
alike threads across ranks are one entry with their ranks, thread ids and
frameless threads left out, and rank lists read as ranges."""
from crown._stacks import RankStacks, Stacks, ranges

CROWN_RUNTIME = False

SERVING = '  File "crown/__init__.py", line 56 in init\n  File "train.py", line 9 in <module>\n'
STUCK = '  File "train.py", line 3 in spin\n'


def reply(rank, *threads, error=""):
    text = "".join(f"Thread 0x{0x7f00 + rank * 16 + i:x} (most recent call first):\n{frames}\n"
                   for i, frames in enumerate(threads))
    return RankStacks(rank, "node1", 100 + rank, text, "", error)


def test_ranges_read_as_in_a_hostlist():
    assert ranges([5, 0, 1, 2, 3]) == "0-3,5"
    assert ranges([7]) == "7" and ranges([]) == ""
    assert ranges([1, 3, 4, 6, 7, 8]) == "1,3-4,6-8"


def test_alike_threads_merge_and_the_odd_one_out_stands_alone():
    stacks = Stacks([reply(r, SERVING) for r in (0, 1, 3)] +
                    [reply(2, SERVING, STUCK, "  <no Python frame>\n")])
    merged = stacks.merged()
    assert [ranks for ranks, _ in merged] == [[0, 1, 2, 3], [2]]
    assert merged[1][1] == ('  File "train.py", line 3 in spin',)
    text = str(stacks)
    assert text.startswith("ranks 0-3:\n") and "\nrank 2:\n" in text
    assert "0x7f" not in text and "no Python frame" not in text


def test_a_silent_rank_is_named_with_why():
    stacks = Stacks([reply(0, SERVING), reply(1, error="no reply within 5000 ms")])
    assert str(stacks).endswith("rank 1 (node1) did not answer: no reply within 5000 ms")
    assert stacks.by_rank[1].threads() == []
