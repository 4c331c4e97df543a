"""The controller returns while the engines still have tensor work queued,
in a program that started MPI itself (mpi4py first: crown's ranks then exit
through Python's own teardown). Every rank exits 0: shutdown lets the
engines finish first, and an engine that goes at exit touches nothing of
what static teardown already freed."""
from mpi4py import MPI  # noqa: F401 - first: the program owns MPI

import torch

import crown


def main():
    procs = crown.world()
    with procs.activate():
        x = torch.ones(128, 128)
        for _ in range(200):
            x = (x @ x).relu() / 128
    print("controller done with work still queued")


crown.run(main)
