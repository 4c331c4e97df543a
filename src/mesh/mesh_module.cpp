#include "mesh/mesh_module.h"

#include "crown/common/env.h"
#include "mesh/cast_agent.h"

namespace crown::mesh {

namespace detail {

void hostMeshAgent(Proc& proc, std::uint64_t local, MeshModule& module);  // mesh_agent.cpp

MeshModule::MeshModule() = default;
MeshModule::~MeshModule() = default;

MeshModule& MeshModule::of(Proc& proc) {
  auto* module = proc.findModule<MeshModule>();
  if (!module) {
    throw Error("this proc has no mesh module: add crown::mesh::meshModule() to "
                "Proc::Options::modules");
  }
  return *module;
}

void MeshModule::install(Proc& proc, SystemIds& ids) {
  proc_ = &proc;
  fanout_ = static_cast<std::size_t>(env::integer("CROWN_CAST_FANOUT", 16, 1, 1 << 20));
  std::uint64_t castAgent = ids.claim();
  meshAgent_ = ids.claim();
  caster_ = std::make_unique<CastAgent>(proc, castAgent);
  proc.setRawAgent(castAgent, [caster = caster_.get()](wire::Envelope&& envelope,
                                                       wire::Bytes&& bytes) {
    caster->onMessage(std::move(envelope), std::move(bytes));
  });
  hostMeshAgent(proc, meshAgent_, *this);
}

void MeshModule::stop() { caster_->stop(); }

void MeshModule::peerLost(Rank peer, const std::string&) { caster_->peerLost(peer); }

void MeshModule::actorStopped(std::uint64_t local) {
  std::lock_guard lock(pointsMutex_);
  points_.erase(local);
}

std::uint64_t MeshModule::newMeshLocal() {
  return kMeshLocalBit | (std::uint64_t{proc_->rank()} << 32) | nextMesh_.fetch_add(1);
}

void MeshModule::remember(std::uint64_t local, std::shared_ptr<const Point> point) {
  std::lock_guard lock(pointsMutex_);
  points_[local] = std::move(point);
}

std::shared_ptr<const Point> MeshModule::pointOf(std::uint64_t local) {
  std::lock_guard lock(pointsMutex_);
  auto it = points_.find(local);
  return it == points_.end() ? nullptr : it->second;
}

std::size_t MeshModule::hostedMeshActors() {
  std::lock_guard lock(pointsMutex_);
  return points_.size();
}

void MeshModule::setSpawnObserver(SpawnObserver observer) {
  auto shared = observer ? std::make_shared<const SpawnObserver>(std::move(observer)) : nullptr;
  std::lock_guard lock(observerMutex_);
  observer_ = std::move(shared);
}

void MeshModule::spawning(std::uint64_t mesh, const Shape& shape, const std::string& name) {
  std::shared_ptr<const SpawnObserver> observer;
  {
    std::lock_guard lock(observerMutex_);
    observer = observer_;
  }
  if (observer) (*observer)(mesh, shape, name);  // outside the lock: it may take its own
}

}  // namespace detail

Proc::ModuleFactory meshModule() {
  return [] { return std::make_unique<detail::MeshModule>(); };
}

std::size_t castFanout(Proc& proc) { return detail::MeshModule::of(proc).fanout(); }

void setSpawnObserver(Proc& proc, SpawnObserver observer) {
  detail::MeshModule::of(proc).setSpawnObserver(std::move(observer));
}

void setCastFanout(Proc& proc, std::size_t fanout) {
  if (fanout == 0) throw ConfigError("a cast needs a fan-out of at least 1");
  detail::MeshModule::of(proc).setFanout(fanout);
}

void cast(Proc& proc, CastRequest request, std::function<void(CastResult&&)> done,
          std::function<void(CastEntry&&)> onEntry) {
  detail::MeshModule::of(proc).caster().castFrom(std::move(request), std::move(done),
                                                 std::move(onEntry));
}

}  // namespace crown::mesh
