"""ProcMesh.respawn_lost() (issue 13): under mpirun --enable-recovery a rank
that dies is replaced by a new process (MPI_Comm_spawn) under a new rank
number, in the lost one's place in the mesh. The replacement hosts actors,
takes casts (through the multicast tree, so survivors must know it), and
talks to survivors peer to peer; a replacement that dies is replaced too;
and the job still ends with main's 0, leaving no process behind."""
import os
import time

import crown
import print_faults
from crown.actor import Actor, SupervisionError, current_rank, endpoint


class Member(Actor):
    @endpoint
    def where(self):
        return (current_rank().rank, os.getpid(), current_rank()["ranks"])

    @endpoint
    def die(self):
        os.kill(os.getpid(), 9)

    @endpoint
    def ask(self, peer):
        """Calls `peer` (an actor mesh of one) from inside this actor."""
        return peer.where.call_one().get(timeout=20)


def kill(members, position):
    try:
        members.slice(ranks=position).die.call_one().get(timeout=20)
    except SupervisionError as lost:
        return lost.rank
    raise AssertionError("the killed member answered")


def replace(procs):
    started = time.monotonic()
    whole = procs.respawn_lost()
    return whole, time.monotonic() - started


def main():
    print_faults.install()
    procs = crown.world_flat()
    assert procs.respawn_lost() is procs, "nothing is lost yet"
    first = procs.spawn("first", Member)
    before = first.where.call().get(timeout=30).values()
    lost = kill(first, 2)
    print(f"lost rank {lost}", flush=True)

    whole, took = replace(procs)
    ranks = whole.shape.ranks()
    print(f"respawned in {took:.2f} s: ranks {ranks}", flush=True)
    assert len(ranks) == 4 and lost not in ranks and ranks[2] >= 4, ranks
    assert ranks[:2] == [0, 1] and ranks[3] == 3, ranks
    assert whole.respawn_lost() is whole, "nothing is lost any more"

    members = whole.spawn("members", Member)
    after = members.where.call().get(timeout=30).values()
    assert [rank for rank, _, _ in after] == ranks, after
    assert [position for _, _, position in after] == [0, 1, 2, 3], after
    assert after[2][1] != before[2][1], "the replacement is a new process"
    print(f"all 4 positions answer: {[rank for rank, _, _ in after]}", flush=True)

    to_new = members.slice(ranks=1).ask.call_one(members.slice(ranks=2)).get(timeout=30)
    from_new = members.slice(ranks=2).ask.call_one(members.slice(ranks=3)).get(timeout=30)
    assert to_new[0] == ranks[2] and from_new[0] == 3, (to_new, from_new)
    print(f"peer to peer: rank 1 -> rank {to_new[0]} -> rank {from_new[0]}", flush=True)

    # The replacement itself dies, and is replaced in its turn.
    lost_again = kill(members, 2)
    assert lost_again == ranks[2], (lost_again, ranks)
    again, took = replace(whole)
    again_ranks = again.shape.ranks()
    assert len(again_ranks) == 4 and again_ranks[2] not in ranks, again_ranks
    values = again.spawn("again", Member).where.call().get(timeout=30).values()
    assert [rank for rank, _, _ in values] == again_ranks, values
    print(f"replaced the replacement in {took:.2f} s: ranks {again_ranks}", flush=True)
    # The first mesh still holds lost rank 2: it gets the live replacement, no new process.
    assert procs.respawn_lost().shape.ranks() == again_ranks, "a second replacement started"
    print("respawn done", flush=True)


crown.run(main)
