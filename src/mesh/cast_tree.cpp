#include "crown/mesh/cast_tree.h"

#include <algorithm>

#include "crown/common/error.h"

namespace crown::mesh {

CastTree::CastTree(Slice slice, std::size_t fanout)
    : slice_(std::move(slice)), fanout_(fanout), size_(slice_.size()) {
  if (fanout_ == 0) throw ConfigError("a cast tree needs a fan-out of at least 1");
}

std::size_t CastTree::indexOf(std::size_t rank) const { return slice_.indexOf(rank); }

std::size_t CastTree::rankAt(std::size_t index) const { return slice_.rankAt(index); }

std::vector<std::size_t> CastTree::ranksOf(std::size_t firstIndex) const {
  std::vector<std::size_t> ranks;
  for (std::size_t i = firstIndex; i < size_ && i - firstIndex < fanout_; ++i)
    ranks.push_back(rankAt(i));
  return ranks;
}

std::vector<std::size_t> CastTree::rootChildren() const { return ranksOf(0); }

std::vector<std::size_t> CastTree::children(std::size_t rank) const {
  std::size_t index = indexOf(rank);
  // The first child, k(i+1), exists only when it is at most n-1 (tested
  // without computing it, which could overflow for a large fan-out).
  if (index + 1 > (size_ - 1) / fanout_) return {};
  return ranksOf(fanout_ * (index + 1));
}

std::vector<std::size_t> CastTree::subtree(std::size_t rank) const {
  // Below member i are the index ranges [k(first+1), k(last+1)+k-1] of each
  // level, starting from [i, i]: consecutive at every level.
  std::vector<std::size_t> ranks;
  std::size_t first = indexOf(rank);
  std::size_t last = first;
  while (first < size_) {
    for (std::size_t i = first; i <= last && i < size_; ++i) ranks.push_back(rankAt(i));
    if (first + 1 > (size_ - 1) / fanout_) break;  // no child of first exists (no overflow)
    first = fanout_ * (first + 1);
    // Members beyond n-1 do not exist, so clipping last loses none (and
    // keeps the products small).
    last = std::min(size_ - 1, fanout_ * (std::min(last, size_ - 1) + 1) + fanout_ - 1);
  }
  return ranks;
}

std::size_t CastTree::depthOfIndex(std::size_t index) const {
  // Level d (d >= 1) holds the members numbered from first(d) = k + ... + k^(d-1)
  // up to first(d) + k^d - 1.
  std::size_t depth = 1;
  std::size_t levelFirst = 0;
  std::size_t levelSize = fanout_;
  while (index - levelFirst >= levelSize) {
    levelFirst += levelSize;
    levelSize = fanout_ == 1 ? 1 : levelSize * fanout_;
    ++depth;
  }
  return depth;
}

std::size_t CastTree::depth(std::size_t rank) const { return depthOfIndex(indexOf(rank)); }

std::size_t CastTree::height() const { return depthOfIndex(size_ - 1); }

}  // namespace crown::mesh
