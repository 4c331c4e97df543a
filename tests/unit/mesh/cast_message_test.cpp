// decodeCast: what a hop accepts of the bytes of a cast, and what it refuses
// as a ProtocolError before routing anything.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crown/common/error.h"
#include "mesh/cast_message.h"

namespace crown::mesh::detail {
namespace {

CastMessage castTo(Slice slice, std::uint32_t fanout) {
  std::vector<std::uint64_t> seqs(slice.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) seqs[i] = 10 + i;
  return {{0, 5},
          1,
          std::move(slice),
          fanout,
          9,
          encodeRuns(seqs),
          static_cast<std::uint8_t>(CastMode::kCollect),
          "",
          "tests.Ping",
          "ping"};
}

TEST(CastMessage, AHopDecodesItsPlaceInTheTree) {
  ReceivedCast cast = decodeCast(wire::toBytes(castTo(Slice::rowMajor({4, 4}), 2)), 5, 16);
  EXPECT_EQ(cast.mode, CastMode::kCollect);
  EXPECT_EQ(cast.seq, 15u);
  EXPECT_EQ(cast.tree->children(5), (std::vector<std::size_t>{12, 13}));
  EXPECT_EQ(cast.message.payload, "ping");
}

// Found by fuzz_cast: a slice of 2^40 ranks with a fan-out of 2^32 - 1
// decoded, and the hop's children (up to the fan-out) or a lost child's
// subtree (up to the slice) were computed as vectors of that many ranks.
TEST(CastMessage, ACastToRanksBeyondTheJobIsAProtocolError) {
  auto message = castTo(Slice::rowMajor({1}), 0xFFFFFFFF);
  message.slice = Slice(0, {std::size_t{1} << 40}, {1});
  EXPECT_THROW(decodeCast(wire::toBytes(message), 0, 16), ProtocolError);
  EXPECT_THROW(decodeCast(wire::toBytes(castTo(Slice::rowMajor({4, 4}), 2)), 5, 15),
               ProtocolError);  // rank 15 is past a job of 15
}

TEST(CastMessage, WhatNoHopCanRouteIsAProtocolError) {
  Slice grid = Slice::rowMajor({4, 4});
  auto refused = [&](CastMessage message, Rank here) {
    EXPECT_THROW(decodeCast(wire::toBytes(message), here, 16), ProtocolError);
  };
  refused(castTo(grid, 0), 5);           // a fan-out of 0
  refused(castTo(grid.at(0, 0), 2), 5);  // rank 5 is not a member
  auto mode = castTo(grid, 2);
  mode.mode = 4;  // no such mode
  refused(mode, 5);
  auto seqs = castTo(grid, 2);
  seqs.seqs = encodeRuns({1, 1, 1});  // no order position for member 5
  refused(seqs, 5);
  EXPECT_THROW(decodeCast("not a cast", 5, 16), ProtocolError);
}

}  // namespace
}  // namespace crown::mesh::detail
