// Shape: a Slice with a label on each dimension, e.g. {hosts=2, procs=4}.
// Meshes are addressed through their shape: by label, an integer index
// removes a dimension (`at`), a range keeps it (`range`). The ranks are those
// of the slice, so a sliced shape still names the ranks of the whole job. A
// plain value: any thread.
#pragma once

#include <boost/serialization/split_member.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "crown/mesh/slice.h"

namespace crown::mesh {

/// A labelled dimension: its label and its size.
using Dim = std::pair<std::string, std::size_t>;

/// What select() does to one dimension: an index removes it, a Range keeps it.
using Selector = std::variant<std::int64_t, Range>;

class Shape {
 public:
  /// No dimensions: the single rank 0.
  Shape() = default;
  /// Row-major from rank 0: Shape{{"hosts", 2}, {"procs", 4}}. Throws
  /// ConfigError for an empty or repeated label or a size of 0.
  Shape(std::initializer_list<Dim> dims) : Shape(std::vector<Dim>(dims)) {}
  explicit Shape(const std::vector<Dim>& dims);
  /// One label per dimension of slice. Throws ConfigError when the counts
  /// differ, or for an empty or repeated label.
  Shape(std::vector<std::string> labels, Slice slice);

  const std::vector<std::string>& labels() const { return labels_; }
  const Slice& slice() const { return slice_; }
  /// Number of dimensions.
  std::size_t dims() const { return labels_.size(); }
  /// Number of ranks.
  std::size_t size() const { return slice_.size(); }
  /// The size of one dimension. Throws ConfigError when there is no such label.
  std::size_t size(const std::string& label) const;
  /// (label, size) of each dimension, in order.
  std::vector<Dim> sizes() const;
  /// The position of label among the dimensions. Throws ConfigError when
  /// there is no such label.
  std::size_t dim(const std::string& label) const;
  bool hasDim(const std::string& label) const;

  /// The rank at these coordinates, one per label. Throws ConfigError for a
  /// missing or unknown label or an index out of range.
  std::size_t rank(const std::map<std::string, std::size_t>& coords) const;
  /// label -> index of rank. Throws ConfigError when the rank is not in the shape.
  std::map<std::string, std::size_t> coordinates(std::size_t rank) const;
  bool contains(std::size_t rank) const { return slice_.contains(rank); }
  /// Every rank, in row-major order.
  std::vector<std::size_t> ranks() const { return slice_.ranks(); }

  /// Index `index` of dimension label, which goes: at("procs", 1).
  Shape at(const std::string& label, std::int64_t index) const;
  /// Indices begin, begin + step, ... below end (clamped to the size) of
  /// dimension label, which stays. Throws ConfigError for step < 1, begin
  /// out of range, or an empty range.
  Shape range(const std::string& label, std::int64_t begin, std::int64_t end = kEnd,
              std::int64_t step = 1) const;
  Shape range(const std::string& label, const Range& r) const {
    return range(label, r.begin, r.end, r.step);
  }
  /// Several at() and range() at once: select({{"hosts", 0}, {"procs", Range{0, 4, 2}}}).
  /// Every label is checked before anything is applied.
  Shape select(const std::map<std::string, Selector>& selectors) const;
  /// Every dimension as one, named label, with the same ranks in the same
  /// order. Throws ConfigError when the ranks are not evenly spaced in
  /// row-major order (a range with a step on any but the innermost
  /// dimension of size > 1), since no single stride describes them.
  Shape flatten(const std::string& label) const;
  /// Throws ConfigError when from does not exist, or to is empty or names
  /// another dimension. rename(x, x) is the same shape.
  Shape rename(const std::string& from, const std::string& to) const;
  /// Dimension label becomes parts, row-major: split("procs", {{"a", 2}, {"b", 2}}).
  /// A part may reuse label itself. Throws ConfigError when the part sizes do
  /// not multiply to its size, a part is 0, a label is empty or repeated, or
  /// no part is given.
  Shape split(const std::string& label, const std::vector<Dim>& parts) const;

  /// "{hosts=2, procs=4}"
  std::string toString() const;

  friend bool operator==(const Shape&, const Shape&) = default;

  template <class Archive>
  void save(Archive& archive, unsigned) const {
    archive << labels_ << slice_;
  }
  /// Validates what it reads, as the constructor does.
  template <class Archive>
  void load(Archive& archive, unsigned) {
    std::vector<std::string> labels;
    Slice slice;
    archive >> labels >> slice;
    *this = Shape(std::move(labels), std::move(slice));
  }
  BOOST_SERIALIZATION_SPLIT_MEMBER()

 private:
  std::vector<std::string> labels_;
  Slice slice_;
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

}  // namespace crown::mesh
