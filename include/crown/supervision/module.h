// The supervision layer as a Proc::Module (actor/module.h; design.md's
// failure model). When a member of an actor mesh dies on its proc (a
// one-way message's handler threw, or a handler was fatal: the kernel has
// removed it by then, so it refuses every later message with the cause),
// this module tells the mesh's owner: the supervision agent of the rank that
// spawned the mesh (its id says which: mesh/module.h), which hands the
// report to the hook set there (Python's __supervise__ and
// unhandled_fault_hook). Without a hook the report is logged. A process
// that is lost takes its members of every mesh with it: each rank's hook
// hears that once (mesh kEveryMesh), and tells the owners of the meshes
// spawned there that have a member on it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "crown/actor/proc.h"
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

/// The factory to put in Proc::Options::modules (after the mesh module).
Proc::ModuleFactory supervisionModule();

/// The rank that spawned mesh actor `mesh` (its owner's rank).
Rank ownerRank(std::uint64_t mesh);

/// Reports of members that died, on the rank that owns their mesh, go to
/// `hook` on a pool thread, in arrival order. Empty: only logged. Replaces
/// the hook set before.
void setFailureHook(Proc& proc, std::function<void(const MemberFailure&)> hook);

}  // namespace crown::supervision

CROWN_MESSAGE(crown::supervision::MemberFailure, "crown::MemberFailure");
