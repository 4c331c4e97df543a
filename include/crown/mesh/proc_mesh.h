// ProcMesh: a set of procs (ranks) with a labelled shape, e.g. the launch's
// {"hosts": H, "procs": P}. Slicing gives a ProcMesh; spawn<A> creates one A
// on each of its procs, by cast, and returns the ActorMesh once every one is
// constructed. A plain value; any thread.
#pragma once

#include <string>

#include "crown/actor/spawn.h"
#include "crown/mesh/actor_mesh.h"
#include "crown/mesh/sliceable.h"

namespace crown {

namespace mesh::detail {

/// What the mesh agent of each member receives.
struct SpawnMeshActor {
  std::string factory;
  std::string name;
  wire::Bytes args;
  std::uint64_t local = 0;  ///< the id the actor gets on every rank
  Shape shape;              ///< the mesh spawned, for mesh::here()
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& factory& name& args& local& shape;
  }
};

/// What the mesh agent of each member receives to stop it. `onlyStarting`:
/// only a member whose constructor has not returned (Proc::stopLocalIfStarting).
struct StopMeshActor {
  std::uint64_t local = 0;
  bool onlyStarting = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& local& onlyStarting;
  }
};

/// A local id no other mesh in the job has (module.h: kMeshLocalBit, this
/// rank, a count).
std::uint64_t newMeshLocal(Proc& proc);
/// Casts the spawn and waits for every member; throws MeshError naming each
/// rank whose constructor failed (or whose process was lost) and why.
void spawnMesh(const Shape& shape, const SpawnMeshActor& spawn);
/// Casts the spawn without waiting: the future holds every member's outcome.
/// A member whose constructor failed has died of it on its proc
/// (Proc::failLocal: its messages are refused with the cause, and its
/// mesh's owner hears through the modules), whoever waits or not.
Future<ValueMesh<void>> startSpawnMesh(const Shape& shape, const SpawnMeshActor& spawn);

}  // namespace mesh::detail

class ProcMesh : public mesh::Sliceable<ProcMesh> {
 public:
  ProcMesh() = default;
  explicit ProcMesh(mesh::Shape shape) : shape_(std::move(shape)) {}

  const mesh::Shape& shape() const { return shape_; }
  ProcMesh with(mesh::Shape shape) const { return ProcMesh(std::move(shape)); }

  /// A(args...) on every proc of this mesh, under `name`; each can find its
  /// coordinates with mesh::here(). Blocks until all are constructed.
  template <class A, class... Args>
  ActorMesh<A> spawn(const std::string& name, const Args&... args) const {
    static_assert(std::is_base_of_v<Actor, A>, "spawn<A>: A must derive from crown::Actor");
    using Registration = detail::ActorFactoryRegistration<A, std::decay_t<Args>...>;
    (void)Registration::registered;  // odr-use: instantiates the factory on every rank
    std::uint64_t local = mesh::detail::newMeshLocal(Proc::current());
    mesh::detail::spawnMesh(shape_, {Registration::key(), name, wire::packValues(args...), local,
                                     shape_});
    return ActorMesh<A>(shape_, local);
  }

  friend bool operator==(const ProcMesh&, const ProcMesh&) = default;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& shape_;
  }

 private:
  mesh::Shape shape_;
};

}  // namespace crown

CROWN_MESSAGE(crown::mesh::detail::SpawnMeshActor, "crown::SpawnMeshActor");
CROWN_MESSAGE(crown::mesh::detail::StopMeshActor, "crown::StopMeshActor");
