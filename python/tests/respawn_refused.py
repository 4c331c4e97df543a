"""respawn refused, with the reason a user can act on: a rank that is not
lost (under mpirun), or a launcher that cannot start processes (srun;
tests/system/slurm_test.sh runs this there). Prints what was refused."""
import crown
from crown import _crown
from crown.actor import Actor, endpoint


class Member(Actor):
    @endpoint
    def ping(self):
        return "pong"


def main():
    procs = crown.world_flat()
    assert procs.respawn_lost() is procs  # nothing lost: nothing to start, under any launcher
    try:
        _crown.respawn([1])  # rank 1 lives
    except (ValueError, _crown.CrownError) as refused:
        print(f"refused: {type(refused).__name__}: {refused}", flush=True)
    else:
        raise AssertionError("a live rank was replaced")
    # Nothing was lost to the refusal: the mesh still answers.
    print(f"still serving: {procs.spawn('m', Member).ping.call().get(timeout=30).values()}",
          flush=True)


crown.run(main)
