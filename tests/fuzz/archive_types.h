// What fuzz_archive decodes: the messages crown's C++ side reads from the
// network, and the standard types they are built from, each at a fixed
// index (ArchiveSettings::type; the seed generator writes one of each).
#pragma once

#include <boost/serialization/map.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/utility.hpp>
#include <boost/serialization/vector.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "crown/actor/agent.h"
#include "crown/actor/failure.h"
#include "crown/actor/spawn.h"
#include "crown/mesh/cast.h"
#include "crown/mesh/proc_mesh.h"
#include "crown/mesh/shape.h"
#include "crown/mesh/slice.h"
#include "crown/wire/envelope.h"
#include "mesh/cast_message.h"

namespace crown::fuzz {

using ArchiveTypes = std::tuple<
    // The building blocks, alone: each length prefix and element count.
    bool, std::uint64_t, std::string, std::wstring, std::vector<std::uint64_t>,
    std::vector<std::string>, std::map<std::string, std::int64_t>, std::pair<std::string, double>,
    // Messages: the proc agent's, failures, meshes, casts.
    wire::ActorId, agent::StopActor, SpawnActor, detail::RemoteFailure, mesh::Slice, mesh::Shape,
    mesh::detail::SpawnMeshActor, mesh::detail::StopMeshActor, mesh::CastEntry, mesh::CastResult,
    mesh::detail::CastMessage, mesh::detail::CastPartial>;

}  // namespace crown::fuzz
