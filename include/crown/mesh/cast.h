// Casting (design.md, "Casting"): one message to every actor of a mesh
// slice through the multicast tree of CastTree, with the replies combined
// on the way back. This is the untyped layer under ActorMesh; ProcMesh uses
// it to spawn. Any thread may cast; the outcome arrives on a pool thread.
//
// Every proc runs a cast agent (the mesh module, module.h). The sender sends the cast to
// at most k members; each member's agent forwards the same bytes to its
// children (computed from the slice, its position and k alone), hands the
// message to its local actor, and answers its parent once its own actor and
// every child subtree have answered. DLV-1: a member whose actor throws, or
// whose process is lost, gets an error entry; a hop that dies fails its whole
// subtree with ProcessLost; so every cast completes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/mesh/cast_entries.h"
#include "crown/mesh/slice.h"
#include "crown/wire/serialize.h"

namespace crown::mesh {

/// CROWN_CAST_FANOUT (default 16): the k of the cast trees from `proc`,
/// read once, when its mesh module was installed.
std::size_t castFanout(Proc& proc = Proc::current());
/// Sets the k of the casts sent from `proc` from now on (benchmarks compare
/// trees this way); each cast carries its k, so only the sender's counts.
/// Throws ConfigError for 0.
void setCastFanout(Proc& proc, std::size_t fanout);

enum class CastMode : std::uint8_t {
  kBroadcast = 0,  ///< no replies
  kCollect = 1,    ///< every member's reply, gathered up the tree
  kReduce = 2,     ///< replies combined by a registered reducer at every hop
  kStream = 3,     ///< each reply relayed up as it comes
};

/// What a subtree sends up: every entry (collect), or the reduced value and
/// the failed entries (reduce), or nothing but completion (stream). The
/// entries are columnar, so a hop forwards its children's without
/// re-encoding them.
struct CastResult {
  CastEntries entries;
  bool hasValue = false;
  std::string valueType;
  wire::Bytes value;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& entries& hasValue& valueType& value;
  }
};

struct CastRequest {
  Slice slice;                  ///< the members (ranks)
  std::size_t fanout = 16;      ///< k
  std::uint64_t destLocal = 0;  ///< the actor's local id on every member
  std::string type;             ///< message type name
  wire::Bytes payload;
  CastMode mode = CastMode::kCollect;
  std::string reducer;  ///< registry key (kReduce)
};

/// A message already encoded (for an actor's raw handler, Actor::handleRaw:
/// Python's pickled calls), cast by ActorMesh as it is: `type` names it to
/// the handler, `payload` is what the handler reads.
struct RawMessage {
  std::string type;
  wire::Bytes payload;
};

/// A reply kept as it came, for a caller that decodes replies itself
/// (ActorMesh's call, stream and reduceByKey with R = RawReply).
struct RawReply {
  std::string type;
  wire::Bytes payload;
};

/// Casts from the calling actor (ORD-1 holds with its direct sends). `done`
/// gets the combined result once every member has an entry; in kStream,
/// `onEntry` gets each entry first. kBroadcast calls neither.
void cast(Proc& proc, CastRequest request, std::function<void(CastResult&&)> done = {},
          std::function<void(CastEntry&&)> onEntry = {});

}  // namespace crown::mesh

CROWN_MESSAGE(crown::mesh::CastResult, "crown::CastResult");
