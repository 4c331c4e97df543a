// CastTree: the multicast tree of a cast to every rank of a Slice
// (design.md, "Casting"). Computed from the slice and the fan-out alone, so
// each hop finds its own children without a list of ranks in the message.
//
// The members are numbered 0..n-1 in the slice's row-major order. The
// sender (the root, outside the tree) sends to members 0..k-1; member i
// forwards to members k(i+1) .. k(i+1)+k-1 that exist. So every member is
// reached exactly once, no hop sends more than k messages, and the depth
// (hops from the sender) is the least d with k + k^2 + ... + k^d >= n, at
// most ceil(log_k n) for k >= 2. A plain value: any thread.
#pragma once

#include <cstddef>
#include <vector>

#include "crown/mesh/slice.h"

namespace crown::mesh {

class CastTree {
 public:
  /// Throws ConfigError when fanout is 0.
  CastTree(Slice slice, std::size_t fanout);

  const Slice& slice() const { return slice_; }
  std::size_t fanout() const { return fanout_; }

  /// The ranks the sender sends to.
  std::vector<std::size_t> rootChildren() const;
  /// The ranks `rank` forwards to. Throws ConfigError when rank is not a member.
  std::vector<std::size_t> children(std::size_t rank) const;
  /// `rank` and every member below it: whom a cast loses when that hop dies.
  std::vector<std::size_t> subtree(std::size_t rank) const;
  /// Hops from the sender to `rank` (1 for the root's children).
  std::size_t depth(std::size_t rank) const;
  /// The largest depth of any member.
  std::size_t height() const;

  /// Position of a member in row-major order, and back.
  std::size_t indexOf(std::size_t rank) const;
  std::size_t rankAt(std::size_t index) const;

 private:
  std::vector<std::size_t> ranksOf(std::size_t firstIndex) const;  // up to k from firstIndex
  std::size_t depthOfIndex(std::size_t index) const;

  Slice slice_;
  std::size_t fanout_;
  std::size_t size_;
};

}  // namespace crown::mesh
