// The supervision layer as a Proc::Module (actor/module.h; design.md's
// failure model). It owns the owner of every mesh: when a mesh is spawned
// from this proc (mesh::SpawnObserver, before the spawn leaves), it records
// who spawns it, the actor this thread acts for (actingActor(): an
// endpoint's, a constructor's, an actor's loop thread or its own threads),
// or the controller. When a member of an actor mesh dies on its proc (a
// one-way message's handler threw, or a handler was fatal: the kernel has
// removed it by then, so it refuses every later message with the cause),
// this module tells the supervision agent of the rank that spawned the mesh
// (its id says which: mesh/module.h). There, once per member, the report
// goes to the owner: an owning actor gets it as a one-way Supervise message,
// handled in its own turn (a Python actor runs __supervise__; an actor with
// no handler, or one that does not handle it, dies of it, and its own owner
// hears), and a report for an owner still in its constructor waits until it
// is hosted (or goes with the owner's own death when the constructor fails);
// the controller's reports go to the hook set on its rank (Python's
// unhandled_fault_hook), which says whether it handled each; one it did not
// handle ends the job (job_end.h), as does a hook that could not begin
// within the grace (HookWatch). Without a hook they are logged. A process that is
// lost takes its members of every mesh with it: each rank's agent hears that
// once (mesh kEveryMesh) and tells the owner of each mesh spawned there with
// a live member on it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "crown/actor/actor.h"
#include "crown/actor/proc.h"
#include "crown/mesh/shape.h"
#include "crown/wire/serialize.h"

namespace crown::supervision {

/// MemberFailure::mesh of a lost process: its members of every mesh died.
constexpr std::uint64_t kEveryMesh = 0;

/// One member of a mesh died: what its owner learns.
struct MemberFailure {
  std::uint64_t mesh = 0;  ///< the mesh's actor id (the same on every member), or kEveryMesh
  Rank rank = 0;           ///< the member's rank
  std::string host;        ///< its host
  std::string actor;       ///< the mesh's name
  std::string cause;       ///< why it died (for Python, the traceback)
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& mesh& rank& host& actor& cause;
  }
};

/// What an owning actor receives, one-way, when a member of a mesh it owns
/// died: an actor handles it or dies of it (Actor::handle<Supervise>).
struct Supervise {
  MemberFailure failure;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& failure;
  }
};

/// "actor mesh 'NAME': the member on rank R (HOST) died: CAUSE": the
/// report printed for a failure nothing handled.
std::string describe(const MemberFailure& failure);

/// What the controller's hook made of one report.
enum class HookVerdict {
  kHandled,    ///< the hook returned (or the report is not its to hear): the job goes on
  kUnhandled,  ///< the hook raised: the job ends (job_end.h)
  kLate,       ///< it could not begin within the grace: already counted unhandled
};

/// The controller's hook. It calls `begin()` as its own code starts, after
/// waiting for what it needs (Python's GIL): false means too late, and then
/// it returns kLate without running (supervision::HookWatch).
using FailureHook =
    std::function<HookVerdict(const MemberFailure&, const std::function<bool()>& begin)>;

/// A mesh spawned from this proc, and who owns it.
struct OwnedMesh {
  std::uint64_t mesh = 0;
  std::optional<ActorId> owner;  ///< nullopt: the controller
  mesh::Shape shape;
  std::string name;
  std::vector<Rank> live;  ///< the ranks of its members not stopped yet, in shape order
};

/// The factory to put in Proc::Options::modules (after the mesh module).
Proc::ModuleFactory supervisionModule();

/// The rank that spawned mesh actor `mesh` (its owner's rank).
Rank ownerRank(std::uint64_t mesh);

/// Reports for the controller (meshes it owns, and meshes no longer known:
/// stopped whole, or spawned by crown itself), on the rank that spawned
/// them, go to `hook` on the supervision agent's pool thread, in arrival
/// order, once per member; a kUnhandled verdict ends the job
/// (faultUnhandled with describe()). Empty: only logged. Replaces the hook
/// set before.
void setFailureHook(Proc& proc, FailureHook hook);

/// This proc's own threads (not only actors) may spawn meshes, which it then
/// owns as the controller does, their failures going to its hook: a client
/// attached to a served job (Runtime::attach). Rank 0 always may.
void ownMeshesHere(Proc& proc);

/// Who owns mesh `mesh`, spawned from `proc`; nullopt once forgotten (every
/// member stopped) or never recorded.
std::optional<OwnedMesh> ownedMesh(Proc& proc, std::uint64_t mesh);
/// The meshes spawned from `proc` that `owner` owns (nullopt: the controller)
/// and that still have members not stopped.
std::vector<OwnedMesh> ownedBy(Proc& proc, const std::optional<ActorId>& owner);
/// The members of mesh `mesh` on `ranks` were stopped (ActorMesh.stop of a
/// slice): they are not asked again, and once every member is, the owner's
/// record goes.
void membersStopped(Proc& proc, std::uint64_t mesh, const std::vector<Rank>& ranks);


}  // namespace crown::supervision

CROWN_MESSAGE(crown::supervision::MemberFailure, "crown::MemberFailure");
CROWN_MESSAGE(crown::supervision::Supervise, "crown::Supervise");
