#include "crown/mesh/cast_tree.h"

#include "crown/common/error.h"

namespace crown::mesh {

CastTree::CastTree(Slice slice, std::size_t fanout)
    : slice_(std::move(slice)), fanout_(fanout), size_(slice_.size()) {
  if (fanout_ == 0) throw ConfigError("a cast tree needs a fan-out of at least 1");
}

std::size_t CastTree::indexOf(std::size_t rank) const {
  auto coords = slice_.coordinates(rank);  // throws for a non-member
  std::size_t index = 0;
  for (std::size_t d = 0; d < coords.size(); ++d) index = index * slice_.sizes()[d] + coords[d];
  return index;
}

std::size_t CastTree::rankAt(std::size_t index) const {
  if (index >= size_) {
    throw ConfigError("member " + std::to_string(index) + " of a cast tree of " +
                      std::to_string(size_) + " members");
  }
  std::vector<std::size_t> coords(slice_.dims());
  for (std::size_t d = slice_.dims(); d-- > 0;) {
    coords[d] = index % slice_.sizes()[d];
    index /= slice_.sizes()[d];
  }
  return slice_.location(coords);
}

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
