// The mesh layer as a Proc::Module (actor/module.h): on every proc, real or
// simulated (SIM-1), it hosts the cast agent (a raw agent that forwards
// casts down their trees and reduces the replies on the way back) and the
// mesh agent (which spawns and stops this proc's members of actor meshes),
// and it keeps the proc's mesh state: where each hosted mesh actor sits
// (mesh::here()), the counters behind new mesh ids and choose(), and the
// cast fan-out.
#pragma once

#include <cstdint>

#include "crown/actor/proc.h"

namespace crown::mesh {

/// Set in the local id of a mesh actor: one id, chosen by whoever spawned
/// the mesh, on every rank of it, so a cast names its destination once.
constexpr std::uint64_t kMeshLocalBit = std::uint64_t{1} << 63;

/// The factory to put in Proc::Options::modules of every proc.
Proc::ModuleFactory meshModule();

}  // namespace crown::mesh
