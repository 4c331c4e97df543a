// The supervision module (supervision/module.h): on the dead member's proc,
// actorFailed sends a MemberFailure to the owner's supervision agent (and
// peerLost one for every mesh to this rank's own); there, the agent (an actor at a system id, so reports are handled one at a time,
// in order) calls the hook.
#include "crown/supervision/module.h"

#include <mutex>

#include "crown/actor/actor.h"
#include "crown/actor/module.h"
#include "crown/common/log.h"
#include "crown/mesh/module.h"

namespace crown::supervision {
namespace {

class SupervisionModule : public Proc::Module {
 public:
  void install(Proc& proc, SystemIds& ids) override {
    proc_ = &proc;
    agent_ = ids.claim();
    proc.spawnLocalAt(agent_, std::make_unique<Agent>(*this), "supervision-agent");
  }

  void actorFailed(const ActorId& actor, const std::string& name,
                   const std::string& what) override {
    if ((actor.local & mesh::kMeshLocalBit) == 0) return;  // not a mesh member: no owner to tell
    MemberFailure report{actor.local, actor.rank, proc_->host(actor.rank), name, what};
    Rank owner = ownerRank(actor.local);
    try {
      proc_->send(ActorId{owner, agent_}, report);
    } catch (const std::exception& e) {  // the owner is gone: nobody is left to tell
      log::get().error("could not tell rank {} that a member of its mesh '{}' died: {}", owner,
                       name, e.what());
    }
  }

  // A lost process takes its members of every mesh with it: the owners on
  // this rank hear (through the hook, which knows which meshes they own),
  // in the agent's turn like any report.
  void peerLost(Rank peer, const std::string& reason) override {
    MemberFailure report{kEveryMesh, peer, proc_->host(peer), "", reason};
    try {
      proc_->send(ActorId{proc_->rank(), agent_}, report);
    } catch (const std::exception& e) {  // stopping: nobody is left to tell
      log::get().debug("rank {} lost while this rank stops: {}", peer, e.what());
    }
  }

  void setHook(std::function<void(const MemberFailure&)> hook) {
    std::lock_guard lock(mutex_);
    hook_ = std::move(hook);
  }

 private:
  class Agent : public Actor {
   public:
    explicit Agent(SupervisionModule& module) {
      handle<MemberFailure>([&module](const MemberFailure& report) { module.arrived(report); });
    }
  };

  void arrived(const MemberFailure& report) {
    std::function<void(const MemberFailure&)> hook;
    {
      std::lock_guard lock(mutex_);
      hook = hook_;
    }
    if (!hook) {
      if (report.mesh == kEveryMesh) return;  // the lifecycle module has said it is lost
      log::get().error("member rank {} of mesh '{}' died, and nothing supervises it: {}",
                       report.rank, report.actor, report.cause);
      return;
    }
    hook(report);
  }

  Proc* proc_ = nullptr;
  std::uint64_t agent_ = 0;
  std::mutex mutex_;
  std::function<void(const MemberFailure&)> hook_;
};

}  // namespace

Proc::ModuleFactory supervisionModule() {
  return [] { return std::make_unique<SupervisionModule>(); };
}

Rank ownerRank(std::uint64_t mesh) {
  return static_cast<Rank>((mesh & ~mesh::kMeshLocalBit) >> 32);  // mesh_module.cpp's layout
}

void setFailureHook(Proc& proc, std::function<void(const MemberFailure&)> hook) {
  auto* module = proc.findModule<SupervisionModule>();
  if (!module) throw Error("this proc has no supervision module (supervision::supervisionModule)");
  module->setHook(std::move(hook));
}

}  // namespace crown::supervision
