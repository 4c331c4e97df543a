"""The job python.debug drives: 4 ranks, an actor whose endpoint stops at
breakpoint() on every rank, and (with CROWN_DEBUG_POST_MORTEM=1) one whose
endpoint raises on rank 3. Prints what the controller got back."""
import crown
from crown.actor import Actor, current_rank, endpoint


class Debugee(Actor):
    @endpoint
    def step(self, base: int) -> int:
        rank = current_rank().rank
        value = base + rank
        breakpoint()
        value = value * 10
        return value

    @endpoint
    def fail(self) -> int:
        rank = current_rank().rank
        if rank == 3:
            raise ValueError(f"rank {rank} has a bad shard")
        return rank


def main():
    procs = crown.world()
    debugee = procs.spawn("debugee", Debugee)
    print("job: calling step", flush=True)
    print("job: step returned", sorted(debugee.step.call(7).get().values()), flush=True)
    try:
        debugee.fail.call().get()
        print("job: fail raised nothing", flush=True)
    except Exception as error:  # noqa: BLE001 - the test reads what it was
        print(f"job: fail raised {type(error).__name__}: rank 3 has a bad shard"
              if "rank 3 has a bad shard" in str(error) else f"job: fail raised {error!r}",
              flush=True)


crown.run(main)
