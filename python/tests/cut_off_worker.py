"""A rank cut off from a controller that then vanishes (issue 10, SHT-1).
Rank 2 runs with a smaller frame limit, so it refuses the controller's large
call as a bad frame: the call fails naming the refusal, nobody is taken for
lost (a protocol error is no lost process), and rank 2 is left with no link
to the controller. Then the controller dies without a word (os._exit). Rank
1 sees its link close; rank 2 has none, and only its watchdog of the
controller ends it: before the watchdog it served on forever and the job
never ended."""

import os
import sys

import crown
from crown.actor import Actor, SupervisionError, endpoint


class Echo(Actor):
    @endpoint
    def length(self, data):
        return len(data)


def main():
    echo = crown.world_flat().slice(ranks=2).spawn("echo", Echo)
    assert echo.length.call_one(b"small").get(timeout=20) == 5
    try:
        echo.length.call_one(b"x" * 200_000).get(timeout=20)
        raise AssertionError("rank 2 took a frame over its limit")
    except SupervisionError as lost:
        raise AssertionError(f"a refused frame was taken for a lost process: {lost}") from None
    except crown.actor.ActorError:
        raise
    except Exception as refused:  # noqa: BLE001 - the refusal, whatever its Python type
        print("refused, not lost:", refused, flush=True)
    sys.stdout.flush()
    os._exit(0)  # the controller vanishes: no Shutdown, no last words


crown.run(main)
