// mesh_cast: one actor per rank, addressed as a mesh. Run it under any SPMD
// launcher:
//   mpirun -n 4 ./mesh_cast
// The controller spawns a Counter on every proc of the world mesh
// {hosts, procs}, casts to all of them and to slices, reduces their
// replies up the cast tree, and streams them as they arrive.
#include <crown/crown.h>

#include <iostream>

struct Add {
  int by = 1;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& by;
  }
};

class Counter : public crown::Actor {
 public:
  explicit Counter(int start) : value_(start) {
    handle<Add>([this](const Add& add) { return value_ += add.by; });
  }

 private:
  int value_;
};

int main(int argc, char** argv) {
  return crown::run(argc, argv, [](crown::Controller& ctl) {
    crown::ProcMesh procs = ctl.world();  // {hosts=H, procs=P}
    auto counters = procs.spawn<Counter>("counter", 0);
    std::cout << "spawned " << counters.size() << " counters on " << procs.shape() << std::endl;

    crown::ValueMesh<int> all = counters.call<int>(Add{2}).get();  // every counter, through the tree
    std::cout << "counter at procs=0 holds " << all.get({{"hosts", 0}, {"procs", 0}}) << std::endl;

    int one = counters.slice({{"hosts", 0}, {"procs", 0}}).call_one<int>(Add{1}).get();
    std::cout << "call_one on the first counter: " << one << std::endl;

    int total = counters.reduce<int>(Add{0}, crown::mesh::Sum{}).get();  // summed on the way up
    std::cout << "sum over the mesh: " << total << std::endl;

    auto stream = counters.stream<int>(Add{10});
    while (auto reply = stream.next()) {
      std::cout << "  rank " << reply->rank << " now holds " << reply->get() << std::endl;
    }
    std::cout << "mesh_cast done on " << ctl.size() << " ranks" << std::endl;
  });
}
