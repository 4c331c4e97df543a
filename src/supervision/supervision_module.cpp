// The supervision module (supervision/module.h): the owner table, filled by
// the mesh layer's spawn observer on the spawning thread; on the dead
// member's proc, actorFailed sends a MemberFailure to the owner's supervision
// agent (and peerLost one for every mesh to this rank's own); there, the
// agent (an actor at a system id, so reports are handled one at a time, in
// order) dedupes them and routes each: a Supervise message to an owning
// actor (parked while the owner is still in its constructor), or the hook
// for the controller.
#include "crown/supervision/module.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "crown/actor/actor.h"
#include "crown/actor/module.h"
#include "crown/common/log.h"
#include "crown/mesh/module.h"
#include "crown/supervision/job_end.h"

namespace crown::supervision {
namespace {


// The controller is rank 0 of the launch (design.md); a spawn elsewhere with
// no actor to own it comes from a thread crown does not know.
constexpr Rank kControllerRank = 0;

class SupervisionModule : public Proc::Module {
 public:
  void install(Proc& proc, SystemIds& ids) override {
    proc_ = &proc;
    agent_ = ids.claim();
    proc.spawnLocalAt(agent_, std::make_unique<Agent>(*this), "supervision-agent");
    mesh::setSpawnObserver(proc, [this](std::uint64_t mesh, const mesh::Shape& shape,
                                        const std::string& name) { spawning(mesh, shape, name); });
  }

  void actorStarted(std::uint64_t local) override {
    if (local < kFirstActorLocalId) return;
    std::vector<MemberFailure> parked;
    {
      std::lock_guard lock(mutex_);
      hosted_.insert(local);
      auto it = parked_.find(local);
      if (it == parked_.end()) return;
      parked = std::move(it->second);
      parked_.erase(it);
    }
    // Its constructor is done: what it missed meanwhile, in arrival order.
    for (auto& report : parked) tellActor(ActorId{proc_->rank(), local}, std::move(report));
  }

  void actorStopped(std::uint64_t local) override { removed(local); }

  void actorFailed(const ActorId& actor, const std::string& name,
                   const std::string& what) override {
    removed(actor.local);
    std::string cause = what;
    {
      // An owner whose constructor failed: the reports that waited for it go
      // up with its own death (it never handled them).
      std::lock_guard lock(mutex_);
      auto it = parked_.find(actor.local);
      if (it != parked_.end()) {
        for (const auto& report : it->second)
          cause += "\nit died before it could supervise its mesh '" + report.actor +
                   "': " + describe(report);
        parked_.erase(it);
      }
    }
    if ((actor.local & mesh::kMeshLocalBit) == 0) return;  // not a mesh member: no owner to tell
    MemberFailure report{actor.local, actor.rank, proc_->host(actor.rank), name, cause};
    Rank owner = ownerRank(actor.local);
    try {
      proc_->send(ActorId{owner, agent_}, report);
    } catch (const std::exception& e) {  // the owner is gone: nobody is left to tell
      log::get().error("could not tell rank {} that a member of its mesh '{}' died: {}", owner,
                       name, e.what());
    }
  }

  // A lost process takes its members of every mesh with it: the owners of
  // the meshes spawned here hear, in the agent's turn like any report.
  void peerLost(Rank peer, const std::string& reason) override {
    if (proc_->departing(peer)) return;  // its procs were stopped: no member failed
    MemberFailure report{kEveryMesh, peer, proc_->host(peer), "", reason};
    try {
      proc_->send(ActorId{proc_->rank(), agent_}, report);
    } catch (const std::exception& e) {  // stopping: nobody is left to tell
      log::get().debug("rank {} lost while this rank stops: {}", peer, e.what());
    }
  }

  void ownMeshesHere() { controls_ = true; }

  void setHook(FailureHook hook) {
    std::lock_guard lock(mutex_);
    hook_ = std::move(hook);
  }

  std::optional<OwnedMesh> owned(std::uint64_t mesh) {
    std::lock_guard lock(mutex_);
    auto it = owners_.find(mesh);
    if (it == owners_.end()) return std::nullopt;
    return view(it->first, it->second);
  }

  std::vector<OwnedMesh> ownedBy(const std::optional<ActorId>& owner) {
    std::vector<OwnedMesh> found;
    std::lock_guard lock(mutex_);
    for (const auto& [mesh, entry] : owners_) {
      if (entry.owner == owner) found.push_back(view(mesh, entry));
    }
    std::sort(found.begin(), found.end(),
              [](const OwnedMesh& a, const OwnedMesh& b) { return a.mesh < b.mesh; });
    return found;
  }

  void membersStopped(std::uint64_t mesh, const std::vector<Rank>& ranks) {
    std::lock_guard lock(mutex_);
    auto it = owners_.find(mesh);
    if (it == owners_.end()) return;
    it->second.stopped.insert(ranks.begin(), ranks.end());
    if (it->second.stopped.size() >= it->second.shape.size()) owners_.erase(it);
  }

 private:
  struct Entry {
    std::optional<ActorId> owner;
    mesh::Shape shape;
    std::string name;
    std::set<Rank> stopped;
  };

  class Agent : public Actor {
   public:
    explicit Agent(SupervisionModule& module) {
      handle<MemberFailure>([&module](const MemberFailure& report) { module.arrived(report); });
    }
  };

  static OwnedMesh view(std::uint64_t mesh, const Entry& entry) {
    OwnedMesh owned{mesh, entry.owner, entry.shape, entry.name, {}};
    for (std::size_t rank : entry.shape.ranks()) {
      if (!entry.stopped.count(static_cast<Rank>(rank))) owned.live.push_back(static_cast<Rank>(rank));
    }
    return owned;
  }

  static std::string describe(const MemberFailure& report) {
    return "actor mesh '" + report.actor + "': the member on rank " + std::to_string(report.rank) +
           " (" + report.host + ") died: " + report.cause;
  }

  // The spawn observer, on the spawning thread, before the spawn leaves.
  void spawning(std::uint64_t mesh, const mesh::Shape& shape, const std::string& name) {
    std::optional<ActorId> owner = actingActor();
    if (!owner && proc_->rank() != kControllerRank && !controls_) {
      throw Error("cannot spawn '" + name + "' on rank " + std::to_string(proc_->rank()) +
                  ": this thread acts for no actor to own it (not an actor's handler, "
                  "constructor or loop thread, nor a thread one started with "
                  "threading.Thread), and only the controller (rank 0) owns meshes itself");
    }
    std::lock_guard lock(mutex_);
    if (owner) owners_of_.insert(owner->local);
    owners_[mesh] = Entry{owner, shape, name, {}};
  }

  void removed(std::uint64_t local) {
    std::lock_guard lock(mutex_);
    hosted_.erase(local);
    if (owners_of_.count(local)) gone_.insert(local);
  }

  void arrived(const MemberFailure& report) {
    if (report.mesh != kEveryMesh) {
      route(report);
      return;
    }
    // Every mesh spawned here with a live member on the lost rank.
    std::vector<MemberFailure> hit;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [mesh, entry] : owners_) {
        auto ranks = entry.shape.ranks();
        if (std::find(ranks.begin(), ranks.end(), report.rank) == ranks.end()) continue;
        if (entry.stopped.count(report.rank)) continue;
        hit.push_back(MemberFailure{mesh, report.rank, report.host, entry.name,
                                    "its process was lost: " + report.cause});
      }
    }
    std::sort(hit.begin(), hit.end(),
              [](const MemberFailure& a, const MemberFailure& b) { return a.mesh < b.mesh; });
    for (auto& failure : hit) route(failure);
  }

  // One report of one member: to its owning actor, or the controller's hook.
  void route(const MemberFailure& report) {
    std::optional<ActorId> owner;
    FailureHook hook;
    {
      std::lock_guard lock(mutex_);
      // It died, and then its process went too: one failure.
      if (!reported_.insert({report.mesh, report.rank}).second) return;
      auto it = owners_.find(report.mesh);
      if (it != owners_.end()) owner = it->second.owner;
      if (owner) {
        if (!hosted_.count(owner->local) && !gone_.count(owner->local)) {
          parked_[owner->local].push_back(report);  // still in its constructor
          return;
        }
      } else {
        hook = hook_;
      }
    }
    if (owner) {
      tellActor(*owner, report);
      return;
    }
    if (!hook) {
      log::get().error("member rank {} of mesh '{}' died, and nothing supervises it: {}",
                       report.rank, report.actor, report.cause);
      return;
    }
    // The hook decides in its own time; a hook that cannot begin within the
    // grace (Python's, while main holds the GIL in C code) is counted
    // unhandled by the watch.
    std::string described = describe(report);
    HookWatch watch(described);
    if (hook(report, [&watch] { return watch.start(); }) == HookVerdict::kUnhandled)
      faultUnhandled(described);
  }

  // In the owner's turn, one-way: an actor that does not handle it dies of
  // it (design.md's failure model), and its own owner hears.
  void tellActor(const ActorId& owner, MemberFailure report) {
    try {
      proc_->send(owner, Supervise{std::move(report)});
    } catch (const std::exception& e) {
      log::get().error("could not tell actor {} that a member of its mesh died: {}",
                       wire::toString(owner), e.what());
    }
  }

  Proc* proc_ = nullptr;
  std::uint64_t agent_ = 0;
  std::mutex mutex_;
  FailureHook hook_;
  std::atomic<bool> controls_{false};                           // ownMeshesHere: an attached client
  std::unordered_map<std::uint64_t, Entry> owners_;             // mesh -> its owner
  std::set<std::pair<std::uint64_t, Rank>> reported_;           // (mesh, rank) told once
  std::unordered_set<std::uint64_t> hosted_;                    // user actors hosted here
  std::unordered_set<std::uint64_t> owners_of_;                 // actors that own a mesh
  std::unordered_set<std::uint64_t> gone_;                      // ... and were removed since
  std::map<std::uint64_t, std::vector<MemberFailure>> parked_;  // owner in its constructor
};

SupervisionModule& moduleOf(Proc& proc) {
  auto* module = proc.findModule<SupervisionModule>();
  if (!module) throw Error("this proc has no supervision module (supervision::supervisionModule)");
  return *module;
}

}  // namespace

Proc::ModuleFactory supervisionModule() {
  return [] { return std::make_unique<SupervisionModule>(); };
}

Rank ownerRank(std::uint64_t mesh) {
  return static_cast<Rank>((mesh & ~mesh::kMeshLocalBit) >> 32);  // mesh_module.cpp's layout
}

std::string describe(const MemberFailure& failure) {
  return "actor mesh '" + failure.actor + "': the member on rank " +
         std::to_string(failure.rank) + " (" + failure.host + ") died: " + failure.cause;
}

void setFailureHook(Proc& proc, FailureHook hook) {
  moduleOf(proc).setHook(std::move(hook));
}

void ownMeshesHere(Proc& proc) { moduleOf(proc).ownMeshesHere(); }

std::optional<OwnedMesh> ownedMesh(Proc& proc, std::uint64_t mesh) {
  return moduleOf(proc).owned(mesh);
}

std::vector<OwnedMesh> ownedBy(Proc& proc, const std::optional<ActorId>& owner) {
  return moduleOf(proc).ownedBy(owner);
}

void membersStopped(Proc& proc, std::uint64_t mesh, const std::vector<Rank>& ranks) {
  moduleOf(proc).membersStopped(mesh, ranks);
}

}  // namespace crown::supervision
