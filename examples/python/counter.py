"""counter: one Counter per rank, called as a mesh with every adverb.

    mpirun -n 4 python3 examples/python/counter.py
"""
import crown
from crown.actor import Actor, endpoint


class Counter(Actor):
    def __init__(self, start):
        self.value = start

    @endpoint
    def incr(self, by=1):
        self.value += by
        return self.value


def main():
    procs = crown.world()  # {"hosts": H, "procs": P}
    counters = procs.spawn("counter", Counter, 0)
    print("call:", counters.incr.call(2).get())  # a ValueMesh of every counter's value
    print("call_one:", counters.slice(hosts=0, procs=0).incr.call_one().get())
    print("choose:", counters.incr.choose(10).get())
    print("stream:", sorted(future.get() for future in counters.incr.stream(100)))
    counters.incr.broadcast(1000)
    print("total:", sum(counters.incr.call(0).get().values()))


crown.run(main)
