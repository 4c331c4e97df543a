// Slice: an n-dimensional strided view of ranks, {offset, sizes, strides}
// (after Monarch's ndslice). The element at coordinates (c_0, ..., c_n-1)
// is the rank offset + sum(c_i * stride_i); the elements are ordered
// row-major by coordinates. Every mesh, and every slice of a mesh, is one of
// these, so a cast tree can be computed from the slice alone. A plain value:
// any thread.
//
// A slice may also stand over an explicit list of distinct ranks (ofRanks:
// the ranks of a mesh that survived a loss, which no stride describes;
// replacing: a mesh whose lost ranks were respawned under new numbers): the
// strided part then picks positions in that list, and every operation works
// on the positions, so a cast tree over it is computed from the slice alone
// still.
//
// Invariant (kept by the constructor): the slice is nested. Order the
// dimensions of size > 1 by stride; each stride is larger than the span
// sum((size_j - 1) * stride_j) of all the smaller-stride dimensions. Then no
// two coordinates name the same rank, and coordinates() recovers them by
// dividing greedily by the largest stride first. Every row-major slice, and
// everything at(), select() and split() derive from one, is nested.
#pragma once

#include <boost/serialization/split_member.hpp>
#include <boost/serialization/vector.hpp>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace crown::mesh {

/// As the end of a range: up to the end of the dimension.
inline constexpr std::int64_t kEnd = std::numeric_limits<std::int64_t>::max();

/// Indices begin, begin + step, ... below end. Signed so that a negative
/// value is reported, not wrapped; end is clamped to the dimension's size
/// (as Python's slices are), so kEnd means "to the end".
struct Range {
  std::int64_t begin = 0;
  std::int64_t end = kEnd;
  std::int64_t step = 1;
};

class Slice {
 public:
  /// Zero dimensions: the single rank 0.
  Slice() = default;

  /// Throws ConfigError unless sizes and strides have the same length, every
  /// size is at least 1, the slice is nested (see above) and its largest
  /// rank fits in std::size_t.
  Slice(std::size_t offset, std::vector<std::size_t> sizes, std::vector<std::size_t> strides);
  /// The same, its positions standing for `members` (see members()); throws
  /// ConfigError unless they are distinct and cover every position.
  /// Empty members: as above.
  Slice(std::size_t offset, std::vector<std::size_t> sizes, std::vector<std::size_t> strides,
        std::vector<std::size_t> members);

  /// The dense row-major slice of these sizes starting at offset: the last
  /// dimension has stride 1.
  static Slice rowMajor(std::vector<std::size_t> sizes, std::size_t offset = 0);

  /// One dimension over exactly these ranks, in this order. Throws
  /// ConfigError unless there is at least one and they strictly increase.
  static Slice ofRanks(std::vector<std::size_t> ranks);

  /// The same shape with some of its ranks standing for others (old rank ->
  /// new rank): a mesh whose lost ranks were replaced. Throws ConfigError
  /// when an old rank is not in the slice or a new one already is.
  Slice replacing(const std::vector<std::pair<std::size_t, std::size_t>>& replacements) const;

  /// offset, sizes and strides address ranks, or with members() positions
  /// in that list of ranks.
  std::size_t offset() const { return offset_; }
  const std::vector<std::size_t>& sizes() const { return sizes_; }
  const std::vector<std::size_t>& strides() const { return strides_; }
  /// The ranks positions stand for, for a slice made by ofRanks (or derived
  /// from one); empty when positions are ranks.
  const std::vector<std::size_t>& members() const;
  /// Number of dimensions.
  std::size_t dims() const { return sizes_.size(); }
  /// Number of ranks (1 for a zero-dimensional slice).
  std::size_t size() const;

  /// The rank at these coordinates. Throws ConfigError when their number
  /// differs from dims() or one is out of its dimension's range.
  std::size_t location(const std::vector<std::size_t>& coords) const;
  /// The coordinates of rank. Throws ConfigError when the rank is not in the
  /// slice.
  std::vector<std::size_t> coordinates(std::size_t rank) const;
  bool contains(std::size_t rank) const;
  /// The position of rank in row-major order (0..size()-1). Throws
  /// ConfigError when the rank is not in the slice.
  std::size_t indexOf(std::size_t rank) const;
  /// The rank at row-major position index. Throws ConfigError past the end.
  std::size_t rankAt(std::size_t index) const;
  /// Every rank, in row-major order of coordinates.
  std::vector<std::size_t> ranks() const;

  /// The indices begin, begin + step, ... below min(end, size) of dimension
  /// dim; the dimension stays (with fewer elements). Throws ConfigError for a
  /// dimension that does not exist, step < 1, begin outside [0, size), or an
  /// empty range (end <= begin).
  Slice select(std::size_t dim, std::int64_t begin, std::int64_t end = kEnd,
               std::int64_t step = 1) const;
  Slice select(std::size_t dim, const Range& range) const {
    return select(dim, range.begin, range.end, range.step);
  }
  /// Index `index` of dimension dim; the dimension goes. Throws ConfigError
  /// for a dimension that does not exist or an index outside [0, size).
  Slice at(std::size_t dim, std::int64_t index) const;
  /// Dimension dim becomes several, row-major, whose sizes multiply to its
  /// size. Throws ConfigError when they do not, or when one is 0 or none
  /// is given.
  Slice split(std::size_t dim, const std::vector<std::size_t>& sizes) const;
  /// The same ranks, in the same order, as one dimension. Possible exactly
  /// when they are evenly spaced in row-major order (a dense row-major
  /// slice, or one strided only in its innermost dimension of size > 1);
  /// throws ConfigError otherwise.
  Slice flatten() const;

  /// "{offset=0, sizes=[2, 4], strides=[4, 1]}"
  std::string toString() const;

  /// Structural: the same offset, sizes, strides and members. Two slices
  /// with the same ranks may differ in the stride of a size-1 dimension.
  friend bool operator==(const Slice& a, const Slice& b) {
    return a.offset_ == b.offset_ && a.sizes_ == b.sizes_ && a.strides_ == b.strides_ &&
           a.members() == b.members();
  }

  template <class Archive>
  void save(Archive& archive, unsigned) const {
    archive << offset_ << sizes_ << strides_ << members();
  }
  /// Validates what it reads, as the constructor does: bytes from a peer
  /// never make an invalid slice.
  template <class Archive>
  void load(Archive& archive, unsigned) {
    std::size_t offset = 0;
    std::vector<std::size_t> sizes, strides, members;
    archive >> offset >> sizes >> strides >> members;
    *this = Slice(offset, std::move(sizes), std::move(strides), std::move(members));
  }
  BOOST_SERIALIZATION_SPLIT_MEMBER()

 private:
  /// The row-major position of rank, if it is a member; allocates nothing
  /// (a cast looks up its hop's place in every slice it carries).
  std::optional<std::size_t> findIndex(std::size_t rank) const;
  /// Calls visit(d, coordinate) for the dimensions of size > 1 of rank's
  /// coordinates, by decreasing stride; false when rank is not a member
  /// (the coordinates visited so far then mean nothing). Defined, and
  /// used, in slice.cpp only.
  template <class Visit>
  bool walkCoordinates(std::size_t rank, Visit visit) const;
  /// offset + span: the last position this slice reaches.
  std::size_t largestPosition() const;
  /// The position that stands for `rank` (itself without members).
  std::optional<std::size_t> positionOf(std::size_t rank) const;
  /// This slice's positions over `members`: throws ConfigError unless they
  /// are distinct and cover every position.
  Slice over(std::vector<std::size_t> members) const;
  /// A slice derived from this one (same positions) keeps its members.
  Slice inherit(Slice derived) const;
  std::size_t rankOf(std::size_t position) const {
    return members_ ? members_->ranks[position] : position;
  }

  struct Members {
    std::vector<std::size_t> ranks;  // by position
    std::vector<std::pair<std::size_t, std::size_t>> positions;  // (rank, position), by rank
  };

  std::size_t offset_ = 0;
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> strides_;
  std::shared_ptr<const Members> members_;  // null: positions are ranks
};

std::ostream& operator<<(std::ostream& out, const Slice& slice);

}  // namespace crown::mesh
