#include "crown/mesh/proc_mesh.h"

#include <atomic>

namespace crown {
namespace mesh::detail {

std::uint64_t newMeshLocal(Proc& proc) {
  static std::atomic<std::uint32_t> next{1};
  return kMeshLocalBit | (std::uint64_t{proc.rank()} << 32) | next.fetch_add(1);
}

void spawnMesh(const Shape& shape, const SpawnMeshActor& spawn) {
  // The mesh agents, one on every proc, addressed as a mesh of their own.
  auto agents = ActorMesh<Actor>(shape, kMeshAgentLocalId);
  auto failures = agents.call<void>(spawn).get().failures();
  if (!failures.empty()) {
    throw MeshError("spawn of '" + spawn.name + "' on " + shape.toString(), shape.size(),
                    std::move(failures));
  }
}

std::size_t chooseMember(Proc& proc, const Shape& shape) {
  static std::atomic<std::size_t> next{0};
  std::size_t n = shape.size();
  std::size_t start = next.fetch_add(1);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t rank = shape.slice().rankAt((start + i) % n);
    if (proc.alive(static_cast<Rank>(rank))) return rank;
  }
  throw ProcessLost(static_cast<Rank>(shape.slice().rankAt(start % n)), "",
                    "every member of " + shape.toString() + " has been lost");
}

}  // namespace mesh::detail
}  // namespace crown
