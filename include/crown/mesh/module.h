// The mesh layer as a Proc::Module (actor/module.h): on every proc, real or
// simulated (SIM-1), it hosts the cast agent (a raw agent that forwards
// casts down their trees and reduces the replies on the way back) and the
// mesh agent (which spawns and stops this proc's members of actor meshes),
// and it keeps the proc's mesh state: where each hosted mesh actor sits
// (mesh::here()), the counters behind new mesh ids and choose(), the
// cast fan-out, and the observer told of each spawn (SpawnObserver). While a
// member's constructor runs, its thread acts for the member (ActingAs,
// actor.h), so what the constructor spawns is the member's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "crown/actor/proc.h"
#include "crown/mesh/shape.h"

namespace crown::mesh {

/// Set in the local id of a mesh actor: one id, chosen by whoever spawned
/// the mesh, on every rank of it, so a cast names its destination once.
constexpr std::uint64_t kMeshLocalBit = std::uint64_t{1} << 63;

/// The factory to put in Proc::Options::modules of every proc.
Proc::ModuleFactory meshModule();

/// Told of every mesh spawn from this proc (`mesh`: its id, `shape`, `name`)
/// on the spawning thread, before the spawn leaves: what it records is in
/// place before any member can be built, or fail. It may throw to refuse the
/// spawn (nothing is sent then). The seam through which the supervision
/// layer records the owner of every mesh (supervision/module.h).
using SpawnObserver =
    std::function<void(std::uint64_t mesh, const Shape& shape, const std::string& name)>;
/// Sets this proc's observer (one; replaces the one before). From
/// Proc::Module::install of a layer above, or before any spawn.
void setSpawnObserver(Proc& proc, SpawnObserver observer);

}  // namespace crown::mesh
