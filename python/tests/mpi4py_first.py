"""mpi4py imported (and MPI initialised) before crown: crown adopts it."""
from mpi4py import MPI  # noqa: F401  (initialises MPI)

import crown
from crown.actor import Actor, endpoint


class Size(Actor):
    @endpoint
    def world(self):
        return MPI.COMM_WORLD.Get_size()


def main():
    sizes = crown.world().spawn("size", Size).world.call().get().values()
    print("mpi4py sizes:", sizes)


crown.run(main)
