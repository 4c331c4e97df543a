// SimulatedWorld (SIM-1): V virtual procs inside this process, on the
// in-process transport and one shared IoPool, each running the same Proc,
// agents and cast code as a real rank. For tests and benchmarks of trees of
// thousands of procs. The calling thread acts from virtual proc 0 (the
// controller) as long as this is the process's first Proc.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/mesh/proc_mesh.h"

namespace crown::transport {
class LocalHub;
}

namespace crown::mesh {

class SimulatedWorld {
 public:
  /// `procs` virtual procs; world() has the shape `dims` (default {"procs": procs}),
  /// whose sizes must multiply to procs. Each proc has the mesh module, then
  /// `layersAbove` (the modules of layers above mesh, for their tests).
  explicit SimulatedWorld(std::size_t procs, std::vector<Dim> dims = {},
                          std::vector<Proc::ModuleFactory> layersAbove = {});
  /// Stops every proc, then the pool.
  ~SimulatedWorld();
  SimulatedWorld(const SimulatedWorld&) = delete;
  SimulatedWorld& operator=(const SimulatedWorld&) = delete;

  std::size_t size() const { return procs_.size(); }
  Proc& proc(Rank rank) { return *procs_.at(rank); }
  ProcMesh world() const { return ProcMesh(shape_); }
  /// Virtual proc `rank` drops out, as a killed process would: every other
  /// proc learns it is lost, and nothing reaches it any more.
  void disconnect(Rank rank);
  /// Virtual proc `rank` dies unnoticed, as a killed process does in the
  /// moments before its peers see its links fail: from now on it handles
  /// nothing, and frames to and from it vanish without an error, until
  /// disconnect(rank) tells the others it is lost.
  void silence(Rank rank);

 private:
  Shape shape_;
  std::shared_ptr<transport::IoPool> pool_;
  std::shared_ptr<transport::LocalHub> hub_;
  std::shared_ptr<std::vector<std::atomic<bool>>> silenced_;
  std::vector<std::unique_ptr<Proc>> procs_;
};

}  // namespace crown::mesh
