// fuzz_cast: the cast routing decoder, what a hop does with the bytes of a
// cast it receives before anything reaches an actor: decodeCast (the
// CastMessage, its slice, fan-out, mode and order positions, checked
// against the job), then the hop's children in the cast tree and the subtree
// of each, which it walks when that child is lost. Beyond "no crash", every
// rank it would send to or fail must be a later member of the cast and a
// rank of the job, and no hop may send more than the fan-out.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "crown/common/error.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"
#include "mesh/cast_message.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  crown::fuzz::CastSettings settings;
  input.ConsumeData(&settings, sizeof settings);
  // Up to 4,096 ranks, the largest simulated job of the unit tests: larger
  // jobs cost each run more (a lost child's subtree is walked rank by rank)
  // and reach no other code.
  std::size_t worldSize = 1 + std::size_t{settings.worldSize} % 4096;
  auto here = static_cast<crown::Rank>(settings.here % worldSize);

  crown::mesh::detail::ReceivedCast cast;
  try {
    cast = crown::mesh::detail::decodeCast(input.ConsumeRemainingBytesAsString(), here, worldSize);
  } catch (const crown::ProtocolError&) {
    return 0;
  }
  const crown::mesh::CastTree& tree = *cast.tree;
  const crown::mesh::Slice& slice = tree.slice();
  std::size_t index = tree.indexOf(here);
  auto children = tree.children(here);
  CROWN_FUZZ_CHECK(children.size() <= tree.fanout());
  for (std::size_t child : children) {
    CROWN_FUZZ_CHECK(child < worldSize && slice.contains(child));
    CROWN_FUZZ_CHECK(tree.indexOf(child) > index);
    auto below = tree.subtree(child);
    CROWN_FUZZ_CHECK(!below.empty() && below.front() == child && below.size() <= slice.size());
    for (std::size_t rank : below) CROWN_FUZZ_CHECK(rank < worldSize);
  }
  return 0;
}
