// tensors: distributed tensors from a C++ controller, no Python.
//
//   mpirun -n 4 ./tensors
//
// A TensorMesh spawns a tensor engine on every proc; each factory or kernel
// call records a command that every proc runs on its own shard, and the
// results stay there until the controller fetches one.
#include <crown/crown.h>
#include <crown/tensor/tensor_mesh.h>

#include <iostream>

using namespace crown;
using namespace crown::tensor;

int main(int argc, char** argv) {
  return crown::run(argc, argv, [](Controller& ctl) {
    TensorMesh tm(ctl.world());
    auto x = tm.rand({256, 256});                 // a different shard on every proc
    auto s = tm.matmul(x, x).sum();               // each proc's own sum
    double total = s.reduce("procs", Reduction::sum).fetch({{"procs", 0}}).get().item();
    double parts = 0;
    for (std::size_t p = 0; p < ctl.world().size("procs"); ++p)
      parts += s.fetch({{"procs", p}}).get().item();
    std::cout << "sum over procs: " << total << " (the shards add up to " << parts << ")\n";

    auto stacked = x.allgather({"procs"});
    std::cout << "allgather of [256, 256] shards: " << stacked.fetch().get().describe() << "\n";

    // A failed kernel poisons what depends on it; the error names the rank
    // (here the last one's shard is fetched).
    auto bad = tm.call("matmul", {x, tm.ones({3, 3})}, {{{256, 3}, ScalarType::f32}})[0];
    try {
      (bad * bad).fetch({{"procs", ctl.world().size("procs") - 1}}).get();
    } catch (const RemoteError& e) {
      std::cout << "deferred error: " << e.remoteMessage() << "\n";
    }
    std::cout << "tensors done on " << ctl.size() << " ranks\n";
  });
}
