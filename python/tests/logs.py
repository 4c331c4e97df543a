"""The output of 7 workers on the controller's terminal (issue 15): the
same line from many ranks merged with the ranks, the odd one out on its
own, lines printed by themselves once the window (CROWN_LOG_WINDOW=1) is
over, a record made in an actor tagged with it, then Monarch's knobs
(procs.logging_option): each line at once, the ranks' logging level, a file
of its own per rank, and back. The controller
reads its own terminal by pointing its stdout and stderr at files."""

import logging
import os
import sys
import tempfile
import time

import crown
from crown import _logs
from crown.actor import Actor, current_rank, endpoint


class Talker(Actor):
    @endpoint
    def talk(self, odd: int, tag: str) -> int:
        rank = current_rank().rank
        print(f"{tag} loaded checkpoint step 100")
        print(f"{tag} this rank is {'the odd one' if rank == odd else 'like the others'}")
        logging.getLogger("train").warning(f"{tag} a warning")
        return rank


class Terminal:
    """The controller's fds 1 and 2, in files while inside."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self._files = (tempfile.TemporaryFile(), tempfile.TemporaryFile())
        os.dup2(self._files[0].fileno(), 1)
        os.dup2(self._files[1].fileno(), 2)
        self.out = self.err = ""
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in self._saved:
            os.close(fd)
        texts = []
        for f in self._files:
            f.seek(0)
            texts.append(f.read().decode())
            f.close()
        self.out, self.err = texts
        return False


def expect(text: str, line: str, count: int = 1) -> None:
    got = text.splitlines().count(line)
    assert got == count, f"{line!r} {got} times, not {count}, in:\n{text}"


def main() -> None:
    world = crown.world_flat()
    assert world.size() == 8, world
    workers = world.slice(ranks=slice(1, 8))
    talkers = workers.spawn("talkers", Talker)

    # Merged within the window, the odd one out alone; flushed before the end.
    with Terminal() as t:
        assert sorted(talkers.talk.call(3, "A").get().values()) == list(range(1, 8))
        _logs.flush()
    expect(t.out, "[ranks 1-7] A loaded checkpoint step 100")
    expect(t.out, "[ranks 1-2,4-7] A this rank is like the others")
    expect(t.out, "[rank 3] A this rank is the odd one")
    # A record made in an actor carries it (Monarch's tag), without its
    # point here so that the ranks' lines still merge.
    expect(t.err, "[ranks 1-7] [actor=<__main__.Talker talkers>] A a warning")

    # Printed by themselves once the 1 s window is over.
    with Terminal() as t:
        talkers.talk.call(3, "B").get()
        time.sleep(2.5)
    expect(t.out, "[ranks 1-7] B loaded checkpoint step 100")

    # Each line at once, with its rank.
    workers.logging_option(stream_to_client=True)  # Monarch: no window
    with Terminal() as t:
        talkers.talk.call(5, "C").get()
        time.sleep(1.0)
    for rank in range(1, 8):
        expect(t.out, f"[rank {rank}] C loaded checkpoint step 100")
    expect(t.out, "[rank 5] C this rank is the odd one")

    # The ranks' logging level: warnings off.
    workers.logging_option(stream_to_client=True, aggregate_window_sec=1, level=logging.ERROR)
    with Terminal() as t:
        talkers.talk.call(3, "D").get()
        _logs.flush()
    expect(t.out, "[ranks 1-7] D loaded checkpoint step 100")
    assert "D a warning" not in t.err, t.err

    # Each rank's own file, whose name is printed; nothing reaches the terminal.
    directory = tempfile.mkdtemp(prefix="crown-logs-test-")
    os.environ["CROWN_LOG_DIR"] = directory
    with Terminal() as t:
        workers.logging_option()  # Monarch's defaults: a file per rank
        talkers.talk.call(3, "E").get()
        _logs.flush()
    assert f"their own files: {directory}/rank-" in t.err, t.err
    assert "E loaded" not in t.out + t.err, t.out + t.err
    with open(os.path.join(directory, "rank-3.log")) as f:
        own = f.read()
    assert "E this rank is the odd one\n" in own, own
    # A file of its own keeps the whole tag, the actor's point too.
    assert "[actor=<__main__.Talker talkers{'ranks': 2/7}>] E a warning\n" in own, own
    with open(os.path.join(directory, "rank-4.log")) as f:
        assert "E this rank is like the others\n" in f.read()

    # Wrong knobs fail clearly and change nothing.
    for bad in (dict(aggregate_window_sec=3), dict(stream_to_client=True, level=-1),
                dict(stream_to_client=True, aggregate_window_sec=-1)):
        try:
            workers.logging_option(**bad)
        except ValueError as e:
            print(f"refused {bad}: {e}")
        else:
            raise AssertionError(f"logging_option({bad}) was accepted")

    # And back to the terminal.
    workers.logging_option(stream_to_client=True, aggregate_window_sec=1)
    with Terminal() as t:
        talkers.talk.call(3, "F").get()
        _logs.flush()
    expect(t.out, "[ranks 1-7] F loaded checkpoint step 100")
    with open(os.path.join(directory, "rank-3.log")) as f:
        assert "F loaded" not in f.read()
    print("logs: PASS", flush=True)


if __name__ == "__main__":
    crown.init()
    try:
        main()
    finally:
        crown.shutdown()
