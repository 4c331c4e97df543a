// What travels down a cast tree (CastMessage, the same bytes at every hop)
// and sideways up it in stream mode (CastPartial), and how a hop decodes the
// cast it receives. Private to the mesh layer; pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "crown/mesh/cast.h"
#include "crown/mesh/cast_tree.h"
#include "crown/wire/serialize.h"

namespace crown::mesh::detail {

/// `count` consecutive members (in row-major order) whose ORD-1 position is
/// `seq`. A cast to a mesh that only ever receives casts is one run.
struct SeqRun {
  std::uint64_t count = 0;
  std::uint64_t seq = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& count& seq;
  }
};

std::vector<SeqRun> encodeRuns(const std::vector<std::uint64_t>& seqs);
/// The position of member `index`; throws ProtocolError past the runs' end.
std::uint64_t seqAt(const std::vector<SeqRun>& runs, std::uint64_t index);

struct CastMessage {
  ActorId origin;              ///< the casting actor: the sender its members see
  std::uint64_t castId = 0;    ///< unique per origin rank
  Slice slice;
  std::uint32_t fanout = 16;
  std::uint64_t destLocal = 0;
  std::vector<SeqRun> seqs;    ///< ORD-1 position of each member
  std::uint8_t mode = 0;       ///< CastMode
  std::string reducer;
  std::string type;
  wire::Bytes payload;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& origin& castId& slice& fanout& destLocal& seqs& mode& reducer& type& payload;
  }
};

/// A cast as the hop on one rank received it, checked: its mode is known, its
/// fan-out is at least 1, and its members are ranks of the job, the receiving
/// rank among them.
struct ReceivedCast {
  CastMessage message;  ///< but its slice, moved into the tree
  CastMode mode = CastMode::kBroadcast;
  std::shared_ptr<const CastTree> tree;
  std::uint64_t seq = 0;  ///< ORD-1 position of the receiving rank's member
};

/// The cast in `bytes`, received by rank `here` of a job of `worldSize`
/// ranks. Throws ProtocolError for bytes that are not such a cast.
ReceivedCast decodeCast(const wire::Bytes& bytes, Rank here, std::size_t worldSize);

/// Stream mode: one entry, relayed from a member to its parent hop.
struct CastPartial {
  Rank originRank = 0;
  std::uint64_t castId = 0;
  CastEntry entry;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& originRank& castId& entry;
  }
};

}  // namespace crown::mesh::detail

CROWN_MESSAGE(crown::mesh::detail::CastMessage, "crown::CastMessage");
CROWN_MESSAGE(crown::mesh::detail::CastPartial, "crown::CastPartial");
