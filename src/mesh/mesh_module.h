// MeshModule: the mesh layer's per-Proc state and agents (module.h says
// what it holds). Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "crown/actor/module.h"
#include "crown/mesh/module.h"
#include "crown/mesh/point.h"

namespace crown::mesh::detail {

class CastAgent;  // cast_agent.h

class MeshModule : public Proc::Module {
 public:
  MeshModule();
  ~MeshModule() override;
  /// The mesh module of `proc`; throws crown::Error when it has none.
  static MeshModule& of(Proc& proc);

  void install(Proc& proc, SystemIds& ids) override;
  void stop() override;
  void peerLost(Rank peer, const std::string& reason) override;
  void actorStopped(std::uint64_t local) override;

  CastAgent& caster() { return *caster_; }
  /// The mesh agent's id: the same on every proc (module.h).
  std::uint64_t meshAgentId() const { return meshAgent_; }
  std::size_t fanout() const { return fanout_; }
  void setFanout(std::size_t fanout) { fanout_ = fanout; }
  /// A local id no other mesh in the job has: kMeshLocalBit, this rank, a count.
  std::uint64_t newMeshLocal();
  /// A counter for choose()'s round robin.
  std::size_t nextChoice() { return nextChoice_.fetch_add(1); }

  void remember(std::uint64_t local, std::shared_ptr<const Point> point);
  /// The point of mesh actor `local` of this proc, or nullptr.
  std::shared_ptr<const Point> pointOf(std::uint64_t local);
  /// How many mesh actors this proc hosts now: for tests of cleanup.
  std::size_t hostedMeshActors();

  void setSpawnObserver(SpawnObserver observer);
  /// Tells the observer of a spawn from this proc (may throw: refused).
  void spawning(std::uint64_t mesh, const Shape& shape, const std::string& name);

 private:
  Proc* proc_ = nullptr;
  std::unique_ptr<CastAgent> caster_;
  std::uint64_t meshAgent_ = 0;
  std::atomic<std::size_t> fanout_{16};
  std::atomic<std::uint32_t> nextMesh_{1};
  std::atomic<std::size_t> nextChoice_{0};
  std::mutex pointsMutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<const Point>> points_;
  std::mutex observerMutex_;
  std::shared_ptr<const SpawnObserver> observer_;
};

}  // namespace crown::mesh::detail
