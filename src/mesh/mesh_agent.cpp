// The mesh agent (an actor at a system id of the mesh module, the same on
// every proc): spawns this proc's member of an actor mesh when the spawn's
// cast reaches it, under the id the spawner chose for the whole mesh, and
// stops it when the mesh is stopped. The module remembers each mesh actor's
// point for mesh::here() until the actor stops.
#include "crown/actor/actor.h"
#include "crown/actor/spawn.h"
#include "crown/mesh/point.h"
#include "crown/mesh/proc_mesh.h"
#include "mesh/mesh_module.h"

namespace crown::mesh {
namespace detail {
namespace {

thread_local const Point* t_constructing = nullptr;

class MeshAgent : public Actor {
 public:
  MeshAgent(Proc& proc, MeshModule& module) {
    handle<SpawnMeshActor>([&proc, &module](const SpawnMeshActor& spawn) {
      auto point = std::make_shared<const Point>(Point{spawn.shape, proc.rank()});
      // here() before the member's first turn, which may run as soon as it is
      // hosted (Actor::onStart); failLocal and stopLocal forget it.
      module.remember(spawn.local, point);
      std::unique_ptr<Actor> actor;
      const Point* outer = std::exchange(t_constructing, point.get());  // here() in the constructor
      try {
        // The constructor acts for the member: a mesh it spawns is the member's (supervision).
        ActingAs acting(ActorId{proc.rank(), spawn.local});
        actor = crown::detail::constructActor(spawn.factory, spawn.name, spawn.args, proc.rank());
      } catch (const std::exception& e) {
        t_constructing = outer;
        module.actorStopped(spawn.local);  // never hosted: its point goes
        // The member died being born: later messages to it are refused with
        // the cause, and the mesh's owner hears (design.md's failure model).
        proc.failLocal(spawn.local,
                       ActorFailed(proc.rank(), proc.host(proc.rank()), spawn.name, e.what()));
        throw;
      }
      t_constructing = outer;
      proc.spawnLocalAt(spawn.local, std::move(actor), spawn.name);
    });
    handle<StopMeshActor>([&proc](const StopMeshActor& stop) {
      if (stop.onlyStarting) {
        proc.stopLocalIfStarting(stop.local);
      } else {
        proc.stopLocal(stop.local);
      }
    });
  }
};

}  // namespace

void hostMeshAgent(Proc& proc, std::uint64_t local, MeshModule& module) {
  proc.spawnLocalAt(local, std::make_unique<MeshAgent>(proc, module), "mesh-agent");
}

}  // namespace detail

Point here() {
  if (detail::t_constructing) return *detail::t_constructing;
  if (const Actor* actor = Actor::current()) {
    if (auto point = detail::MeshModule::of(Proc::current()).pointOf(actor->id().local))
      return *point;
  }
  throw Error("crown::mesh::here() is for actors spawned as part of a mesh (ProcMesh::spawn), "
              "from their handlers or constructors");
}

}  // namespace crown::mesh
