"""A member of a mesh the controller owns dies and nothing handles it
(Monarch's default unhandled_fault_hook): the report is printed, the
controller's main is interrupted, and the job exits 1."""
import time

import crown
from crown.actor import Actor, endpoint


class Fragile(Actor):
    @endpoint
    def crack(self):
        raise ValueError("cracked on purpose")

    @endpoint
    def ping(self):
        return 1


def main():
    mesh = crown.world_flat().spawn("fragile", Fragile)
    mesh.slice(ranks=1).crack.broadcast()
    deadline = time.time() + 30
    while time.time() < deadline:
        mesh.slice(ranks=0).ping.call_one().get()  # Python runs here: the interrupt lands
        time.sleep(0.05)
    print("main was never interrupted")


crown.run(main)
