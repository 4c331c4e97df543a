// The mesh agent (kMeshAgentLocalId on every proc): spawns this proc's
// member of an actor mesh when the spawn's cast reaches it, under the id the
// spawner chose for the whole mesh, and remembers each mesh actor's point.
#include <map>
#include <mutex>

#include "crown/actor/actor.h"
#include "crown/actor/spawn.h"
#include "crown/mesh/cast.h"
#include "crown/mesh/point.h"
#include "crown/mesh/proc_mesh.h"

namespace crown::mesh {
namespace {

struct IdLess {
  bool operator()(const ActorId& a, const ActorId& b) const {
    return std::tie(a.rank, a.local) < std::tie(b.rank, b.local);
  }
};

std::mutex g_pointsMutex;
std::map<ActorId, Point, IdLess> g_points;  // every mesh actor hosted in this process
thread_local const Point* t_constructing = nullptr;

class MeshAgent : public Actor {
 public:
  explicit MeshAgent(Proc& proc) {
    handle<detail::SpawnMeshActor>([&proc](const detail::SpawnMeshActor& spawn) {
      Point point{spawn.shape, proc.rank()};
      std::unique_ptr<Actor> actor;
      const Point* outer = std::exchange(t_constructing, &point);  // here() in the constructor
      try {
        actor = crown::detail::constructActor(spawn.factory, spawn.name, spawn.args, proc.rank());
      } catch (...) {
        t_constructing = outer;
        throw;
      }
      t_constructing = outer;
      ActorId id = proc.spawnLocalAt(spawn.local, std::move(actor), spawn.name);
      std::lock_guard lock(g_pointsMutex);
      g_points[id] = std::move(point);
    });
  }
};

}  // namespace

void hostMeshAgent(Proc& proc) {
  proc.spawnLocalAt(kMeshAgentLocalId, std::make_unique<MeshAgent>(proc), "mesh-agent");
}

Point here() {
  if (t_constructing) return *t_constructing;
  const Actor* actor = Actor::current();
  if (actor) {
    std::lock_guard lock(g_pointsMutex);
    auto it = g_points.find(actor->id());
    if (it != g_points.end()) return it->second;
  }
  throw Error("crown::mesh::here() is for actors spawned as part of a mesh (ProcMesh::spawn), "
              "from their handlers or constructors");
}

}  // namespace crown::mesh
