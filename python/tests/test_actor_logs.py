"""Log records made inside actors carry the actor (issue 47), as Monarch's
do, under mpirun -n 4: "[actor=<module.Class name{point}>] " starts the
message (and is record.actor_prefix) in endpoints, async endpoints and
__init__; records of the controller's main, of threads an actor started,
empty messages and print() carry none. The controller's terminal (the
tag without its point, so lines merge) is python.logs's to test."""

import asyncio
import contextlib
import io
import logging
import threading

import crown
from crown.actor import Actor, current_rank, endpoint

WAIT = 20


class Captured:
    """Records of the logger "captured", as "%(message)s" lines."""

    def __init__(self):
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(logging.Formatter("%(message)s"))
        self.logger = logging.getLogger("captured")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self.logger.addHandler(self.handler)
        self.records = []
        self.handler.addFilter(lambda record: self.records.append(record) or True)

    def close(self) -> str:
        self.logger.removeHandler(self.handler)
        return self.stream.getvalue()


class Logger(Actor):
    def __init__(self):
        logs = Captured()
        logs.logger.info("constructing")
        self.constructing = logs.close()

    @endpoint
    def log(self, text: str):
        logs = Captured()
        logs.logger.info("%s at %d%%", text, 50)
        logs.logger.info("")  # torch.compile's structured records: left empty
        started = threading.Thread(target=logs.logger.info, args=("from a thread",))
        started.start()
        started.join()
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            print("printed")
        prefixes = [getattr(r, "actor_prefix", None) for r in logs.records]
        return (logs.close(), prefixes, printed.getvalue(), self.constructing,
                f"{type(self).__module__}.Logger loggers{current_rank()}")


class AsyncLogger(Actor):
    @endpoint
    async def log(self):
        await asyncio.sleep(0)
        logs = Captured()
        logs.logger.warning("after an await")
        return logs.close(), str(current_rank())


def test_records_made_in_an_actor_carry_it():
    mesh = crown.world().spawn("loggers", Logger)
    replies = mesh.log.call("hello").get(timeout=WAIT)
    assert len(replies) == 4
    for text, prefixes, printed, constructing, actor in replies.values():
        tag = f"[actor=<{actor}>] "
        assert text == f"{tag}hello at 50%\n\nfrom a thread\n", text
        assert prefixes == [tag, tag, None], prefixes
        assert printed == "printed\n"
        assert constructing == f"{tag}constructing\n"
    assert len({text for text, *_ in replies.values()}) == 4  # each member's own point
    mesh.stop()


def test_an_async_endpoints_records_carry_it():
    mesh = crown.world().spawn("async-loggers", AsyncLogger)
    for text, point in mesh.log.call().get(timeout=WAIT).values():
        assert text == (f"[actor=<{AsyncLogger.__module__}.AsyncLogger async-loggers{point}>] "
                        f"after an await\n"), text
    mesh.stop()


def test_the_controllers_records_carry_no_actor():
    logs = Captured()
    logs.logger.info("from main")
    assert logs.close() == "from main\n"
    assert not hasattr(logs.records[0], "actor_prefix")
