"""crown.run(main, controller="dedicated"): rank 0 only controls, the world
meshes are ranks 1..N-1, and an actor that ends its own process takes only
its rank with it; the controller carries on (mpirun --enable-recovery)."""
import ctypes

import crown
import print_faults
from crown.actor import Actor, SupervisionError, current_rank, endpoint, this_host


class Where(Actor):
    @endpoint
    def rank(self):
        return current_rank().rank

    @endpoint
    def quit(self, code):
        ctypes.CDLL(None).exit(code)  # as a C library would: its last words say the code


def main():
    print_faults.install()
    assert crown.world_flat().shape.ranks() == [1, 2], crown.world_flat()
    assert crown.world().shape.ranks() == [1, 2], crown.world()
    assert this_host().ranks == [1, 2], this_host()
    members = crown.world_flat().spawn("where", Where)
    # One write per line (an f-string): other ranks' stderr must not split it.
    print(f"members on ranks {members.rank.call().get(timeout=20).values()}", flush=True)
    try:
        members.slice(ranks=1).quit.call_one(3).get(timeout=20)
    except SupervisionError as lost:
        print(f"lost: {lost}", flush=True)
    print(f"survivor: {members.slice(ranks=0).rank.call_one().get(timeout=20)}", flush=True)


crown.run(main, controller="dedicated")
