"""ping_pong: two actors on different ranks play ping-pong, driven by the controller.

    mpirun -n 2 python3 examples/python/ping_pong.py
"""
import crown
from crown.actor import Actor, current_rank, endpoint


class Player(Actor):
    def __init__(self, name):
        self.name = name
        self.hits = 0

    @endpoint
    def serve(self, other, rounds):
        """Hits the ball to `other` (an actor mesh of one) until `rounds` are played."""
        for _ in range(rounds):
            self.hits += 1
            other.hit.call_one(self.name).get()
        return self.hits

    @endpoint
    def hit(self, sender):
        self.hits += 1
        return f"{self.name} on rank {current_rank().rank} returned {sender}'s ball"


def main():
    procs = crown.world_flat()
    ping = procs.slice(ranks=0).spawn("ping", Player, "ping")
    pong = procs.slice(ranks=procs.size() - 1).spawn("pong", Player, "pong")
    print(pong.hit.call_one("controller").get())
    print("ping hit", ping.serve.call_one(pong, 100).get(), "balls")
    print(pong.hit.call_one("ping").get())
    print(f"ping_pong done on {procs.size()} ranks")


crown.run(main)
