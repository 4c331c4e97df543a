"""sys.exit() in main ends the job as it ends a Python script: with its
code, or 1 with its message on stderr, and no traceback. CROWN_TEST_EXIT
picks the argument: an integer, or text."""
import os
import sys

import crown
from crown.actor import Actor, endpoint


class Where(Actor):
    @endpoint
    def rank(self):
        return crown.actor.current_rank().rank


def main():
    ranks = sorted(crown.world().spawn("where", Where).rank.call().get().values())
    print(f"members answered: {ranks}", flush=True)
    how = os.environ["CROWN_TEST_EXIT"]
    sys.exit(int(how) if how.lstrip("-").isdigit() else how)


crown.run(main)
