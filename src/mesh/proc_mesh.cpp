#include "crown/mesh/proc_mesh.h"

#include "mesh/mesh_module.h"

namespace crown {
namespace mesh::detail {

std::uint64_t newMeshLocal(Proc& proc) { return MeshModule::of(proc).newMeshLocal(); }

namespace {
// The mesh agents of `shape`'s procs, addressed as a mesh of their own.
ActorMesh<Actor> meshAgents(const Shape& shape) {
  return ActorMesh<Actor>(shape, MeshModule::of(Proc::current()).meshAgentId());
}
}  // namespace

Future<ValueMesh<void>> startSpawnMesh(const Shape& shape, const SpawnMeshActor& spawn) {
  // The observer first (the owner's record): a constructor that fails at
  // once then reports to an owner already known.
  MeshModule::of(Proc::current()).spawning(spawn.local, shape, spawn.name);
  return meshAgents(shape).call<void>(spawn);
}

void spawnMesh(const Shape& shape, const SpawnMeshActor& spawn) {
  auto failures = startSpawnMesh(shape, spawn).get().failures();
  if (!failures.empty()) {
    throw MeshError("spawn of '" + spawn.name + "' on " + shape.toString(), shape.size(),
                    std::move(failures));
  }
}

void stopMesh(const Shape& shape, std::uint64_t local, bool onlyStarting) {
  auto stopped = meshAgents(shape).call<void>(StopMeshActor{local, onlyStarting}).get();
  // The members stopped here are refused the stop that follows; its
  // stopMesh forgets their order counters with the others'.
  if (onlyStarting) return;
  // Only the stopped members' order counters: a slice's other members serve on.
  Proc::current().forgetDestination(local, shape.ranks());
  std::vector<MeshError::Failure> failures;
  for (auto& failure : stopped.failures()) {
    try {
      std::rethrow_exception(failure.error);
    } catch (const ProcessLost&) {
      // a lost member is stopped already
    } catch (...) {
      failures.push_back(std::move(failure));
    }
  }
  if (!failures.empty()) throw MeshError("stop of " + shape.toString(), shape.size(), failures);
}

std::size_t chooseMember(Proc& proc, const Shape& shape) {
  std::size_t n = shape.size();
  std::size_t start = MeshModule::of(proc).nextChoice();
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t rank = shape.slice().rankAt((start + i) % n);
    if (proc.alive(static_cast<Rank>(rank))) return rank;
  }
  throw ProcessLost(static_cast<Rank>(shape.slice().rankAt(start % n)), "",
                    "every member of " + shape.toString() + " has been lost");
}

}  // namespace mesh::detail
}  // namespace crown
