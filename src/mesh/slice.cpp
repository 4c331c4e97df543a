#include "crown/mesh/slice.h"

#include <algorithm>
#include <numeric>
#include <ostream>

#include "crown/common/error.h"
#include "mesh/checks.h"

namespace crown::mesh {

namespace detail {

std::size_t checkIndex(const std::string& what, std::size_t size, std::int64_t index) {
  if (index < 0 || static_cast<std::uint64_t>(index) >= size) {
    throw ConfigError(what + " has size " + std::to_string(size) + "; index " +
                      std::to_string(index) + " is out of range");
  }
  return static_cast<std::size_t>(index);
}

CheckedRange checkRange(const std::string& what, std::size_t size, std::int64_t begin,
                        std::int64_t end, std::int64_t step) {
  if (step < 1) throw ConfigError(what + ": step must be at least 1, got " + std::to_string(step));
  if (begin < 0 || static_cast<std::uint64_t>(begin) >= size) {
    throw ConfigError(what + " has size " + std::to_string(size) + "; range begin " +
                      std::to_string(begin) + " is out of range");
  }
  if (end <= begin) {
    throw ConfigError(what + ": range [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") is empty");
  }
  // Clamped as Python's slices are, so kEnd (or any end past the size) means "to the end".
  std::size_t first = static_cast<std::size_t>(begin);
  std::size_t last = std::min<std::uint64_t>(static_cast<std::uint64_t>(end), size);
  std::size_t stride = static_cast<std::size_t>(step);
  return {first, (last - first - 1) / stride + 1, stride};  // last > first: no overflow
}

std::optional<Slice> flattenSlice(const Slice& slice) {
  // Row-major order walks the last dimension fastest, so the ranks are evenly
  // spaced exactly when each dimension of size > 1 steps over one whole run
  // of the next such dimension. Size-1 dimensions contribute nothing.
  const auto& sizes = slice.sizes();
  const auto& strides = slice.strides();
  std::vector<std::size_t> used;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1) used.push_back(d);
  }
  for (std::size_t i = 0; i + 1 < used.size(); ++i) {
    std::size_t outer = used[i], inner = used[i + 1], run = 0;
    if (__builtin_mul_overflow(strides[inner], sizes[inner], &run) || strides[outer] != run) {
      return std::nullopt;
    }
  }
  // The innermost dimension of size > 1 sets the spacing; a single rank takes stride 1.
  std::size_t stride = used.empty() ? 1 : strides[used.back()];
  return Slice(slice.offset(), {slice.size()}, {stride});
}

std::string listString(const std::vector<std::size_t>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(values[i]);
  }
  return out + "]";
}

}  // namespace detail

namespace {

std::string dimName(std::size_t dim) { return "dimension " + std::to_string(dim); }

void checkDim(const Slice& slice, std::size_t dim) {
  if (dim >= slice.dims()) {
    throw ConfigError(dimName(dim) + " does not exist in a " + std::to_string(slice.dims()) +
                      "-dimensional slice");
  }
}

ConfigError notAMember(std::size_t rank, const Slice& slice) {
  return ConfigError("rank " + std::to_string(rank) + " is not in slice " + slice.toString());
}

}  // namespace

template <class Visit>
bool Slice::walkCoordinates(std::size_t rank, Visit visit) const {
  std::size_t pos = rank;
  if (members_) {  // the rank's position in the list, then the position's coordinates
    auto found = positionOf(rank);
    if (!found) return false;
    pos = *found;
  }
  if (pos < offset_) return false;
  pos -= offset_;
  // Nesting (header) makes the largest stride's quotient the coordinate: the
  // smaller-stride dimensions together reach less than one of its steps. It
  // also makes the strides of size > 1 distinct, so each round takes the
  // largest stride below the last one, with no sorted copy to allocate.
  std::optional<std::size_t> below;
  while (true) {
    std::optional<std::size_t> next;
    for (std::size_t d = 0; d < sizes_.size(); ++d) {
      if (sizes_[d] > 1 && (!below || strides_[d] < *below) &&
          (!next || strides_[d] > strides_[*next])) {
        next = d;
      }
    }
    if (!next) break;
    std::size_t d = *next;
    std::size_t index = pos / strides_[d];
    if (index >= sizes_[d]) return false;
    visit(d, index);
    pos %= strides_[d];
    below = strides_[d];
  }
  return pos == 0;
}

Slice::Slice(std::size_t offset, std::vector<std::size_t> sizes, std::vector<std::size_t> strides)
    : offset_(offset), sizes_(std::move(sizes)), strides_(std::move(strides)) {
  if (sizes_.size() != strides_.size()) {
    throw ConfigError("a slice needs one stride per dimension; got sizes " +
                      detail::listString(sizes_) + " and strides " + detail::listString(strides_));
  }
  std::size_t total = 1;
  for (std::size_t d = 0; d < sizes_.size(); ++d) {
    if (sizes_[d] == 0) {
      throw ConfigError(dimName(d) + " of slice " + toString() +
                        " has size 0; every dimension needs at least one element");
    }
    if (__builtin_mul_overflow(total, sizes_[d], &total)) {
      throw ConfigError("slice " + toString() + " has more elements than std::size_t can count");
    }
  }
  // The nesting invariant (header): by increasing stride, each dimension of
  // size > 1 steps over everything the smaller-stride ones can reach.
  // Sorted by insertion (stable: equal strides keep their order), which,
  // unlike std::stable_sort, takes no buffer: slices are made per cast.
  std::vector<std::size_t> order;
  auto byStride = [this](std::size_t a, std::size_t b) { return strides_[a] < strides_[b]; };
  for (std::size_t d = 0; d < sizes_.size(); ++d) {
    if (sizes_[d] > 1) order.insert(std::upper_bound(order.begin(), order.end(), d, byStride), d);
  }
  std::size_t span = 0;
  for (std::size_t d : order) {
    if (strides_[d] <= span) {
      throw ConfigError("slice " + toString() + " is not nested: " + dimName(d) + " has stride " +
                        std::to_string(strides_[d]) + ", not above " + std::to_string(span) +
                        ", the span of the dimensions with smaller strides, so ranks would "
                        "repeat or interleave");
    }
    std::size_t extent = 0;
    if (__builtin_mul_overflow(sizes_[d] - 1, strides_[d], &extent) ||
        __builtin_add_overflow(span, extent, &span)) {
      throw ConfigError("the ranks of slice " + toString() + " exceed std::size_t");
    }
  }
  std::size_t largest = 0;
  if (__builtin_add_overflow(offset_, span, &largest)) {
    throw ConfigError("the ranks of slice " + toString() + " exceed std::size_t");
  }
}

Slice Slice::rowMajor(std::vector<std::size_t> sizes, std::size_t offset) {
  std::vector<std::size_t> strides(sizes.size());
  std::size_t stride = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    // Overflow here means more ranks than size_t counts; the constructor says so.
    if (__builtin_mul_overflow(stride, sizes[d], &stride)) stride = 1;
  }
  return Slice(offset, std::move(sizes), std::move(strides));
}

Slice::Slice(std::size_t offset, std::vector<std::size_t> sizes, std::vector<std::size_t> strides,
             std::vector<std::size_t> members)
    : Slice(offset, std::move(sizes), std::move(strides)) {
  if (!members.empty()) *this = over(std::move(members));
}

Slice Slice::ofRanks(std::vector<std::size_t> ranks) {
  if (ranks.empty()) throw ConfigError("a slice of chosen ranks needs at least one rank");
  for (std::size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] <= ranks[i - 1]) {
      throw ConfigError("the ranks of a slice of chosen ranks must strictly increase; got " +
                        detail::listString(ranks));
    }
  }
  return rowMajor({ranks.size()}).over(std::move(ranks));
}

Slice Slice::over(std::vector<std::size_t> members) const {
  auto list = std::make_shared<Members>();
  list->positions.reserve(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) list->positions.emplace_back(members[i], i);
  std::sort(list->positions.begin(), list->positions.end());
  for (std::size_t i = 1; i < list->positions.size(); ++i) {
    if (list->positions[i].first == list->positions[i - 1].first) {
      throw ConfigError("the ranks of a slice of chosen ranks must be distinct; got " +
                        detail::listString(members));
    }
  }
  std::size_t largest = largestPosition();
  if (largest >= members.size()) {
    throw ConfigError("slice " + toString() + " reaches position " + std::to_string(largest) +
                      " of a list of " + std::to_string(members.size()) + " ranks");
  }
  list->ranks = std::move(members);
  Slice result = *this;
  result.members_ = std::move(list);
  return result;
}

Slice Slice::replacing(
    const std::vector<std::pair<std::size_t, std::size_t>>& replacements) const {
  std::vector<std::size_t> members(largestPosition() + 1);
  for (std::size_t position = 0; position < members.size(); ++position) {
    members[position] = rankOf(position);
  }
  for (const auto& [old, replacement] : replacements) {
    if (!contains(old)) {
      throw ConfigError("rank " + std::to_string(old) + " is not in slice " + toString() +
                        ": it cannot be replaced");
    }
    members[*positionOf(old)] = replacement;
  }
  return over(std::move(members));  // checks that no new rank was there already
}

Slice Slice::inherit(Slice derived) const {
  derived.members_ = members_;
  return derived;
}

std::size_t Slice::largestPosition() const {
  std::size_t largest = offset_;  // offset + span: no overflow (checked in the constructor)
  for (std::size_t d = 0; d < sizes_.size(); ++d) largest += (sizes_[d] - 1) * strides_[d];
  return largest;
}

std::optional<std::size_t> Slice::positionOf(std::size_t rank) const {
  if (!members_) return rank;
  const auto& positions = members_->positions;
  auto it = std::lower_bound(positions.begin(), positions.end(),
                             std::make_pair(rank, std::size_t{0}));
  if (it == positions.end() || it->first != rank) return std::nullopt;
  return it->second;
}

const std::vector<std::size_t>& Slice::members() const {
  static const std::vector<std::size_t> none;
  return members_ ? members_->ranks : none;
}

std::size_t Slice::size() const {
  return std::accumulate(sizes_.begin(), sizes_.end(), std::size_t{1},
                         [](std::size_t a, std::size_t b) { return a * b; });
}

std::size_t Slice::location(const std::vector<std::size_t>& coords) const {
  if (coords.size() != sizes_.size()) {
    throw ConfigError("slice " + toString() + " has " + std::to_string(sizes_.size()) +
                      " dimensions; got " + std::to_string(coords.size()) + " coordinates " +
                      detail::listString(coords));
  }
  std::size_t rank = offset_;
  for (std::size_t d = 0; d < coords.size(); ++d) {
    if (coords[d] >= sizes_[d]) {
      throw ConfigError(dimName(d) + " has size " + std::to_string(sizes_[d]) + "; index " +
                        std::to_string(coords[d]) + " is out of range");
    }
    rank += coords[d] * strides_[d];  // at most offset + span: checked in the constructor
  }
  return rankOf(rank);
}

std::optional<std::size_t> Slice::findIndex(std::size_t rank) const {
  std::size_t index = 0;
  bool found = walkCoordinates(rank, [&](std::size_t d, std::size_t coordinate) {
    std::size_t weight = 1;  // row-major: the sizes of the dimensions after d
    for (std::size_t e = d + 1; e < sizes_.size(); ++e) weight *= sizes_[e];
    index += coordinate * weight;
  });
  if (!found) return std::nullopt;
  return index;
}

std::vector<std::size_t> Slice::coordinates(std::size_t rank) const {
  std::vector<std::size_t> coords(sizes_.size(), 0);
  if (!walkCoordinates(rank, [&](std::size_t d, std::size_t index) { coords[d] = index; })) {
    throw notAMember(rank, *this);
  }
  return coords;
}

bool Slice::contains(std::size_t rank) const { return findIndex(rank).has_value(); }

std::vector<std::size_t> Slice::ranks() const {
  std::vector<std::size_t> out;
  out.reserve(size());
  std::vector<std::size_t> coords(sizes_.size(), 0);
  std::size_t rank = offset_;
  while (true) {
    out.push_back(rankOf(rank));
    // Odometer: advance the last dimension, carrying into the ones before it.
    std::size_t d = sizes_.size();
    while (d > 0) {
      --d;
      if (++coords[d] < sizes_[d]) {
        rank += strides_[d];
        break;
      }
      rank -= (sizes_[d] - 1) * strides_[d];
      coords[d] = 0;
      if (d == 0) return out;
    }
    if (sizes_.empty()) return out;
  }
}

Slice Slice::select(std::size_t dim, std::int64_t begin, std::int64_t end,
                    std::int64_t step) const {
  checkDim(*this, dim);
  auto range = detail::checkRange(dimName(dim), sizes_[dim], begin, end, step);
  std::vector<std::size_t> sizes = sizes_;
  std::vector<std::size_t> strides = strides_;
  sizes[dim] = range.size;
  // A single element leaves the stride unused: keeping it avoids overflow on
  // a huge step and makes equal selections compare equal.
  if (range.size > 1) strides[dim] *= range.step;
  return inherit(
      Slice(offset_ + range.begin * strides_[dim], std::move(sizes), std::move(strides)));
}

Slice Slice::at(std::size_t dim, std::int64_t index) const {
  checkDim(*this, dim);
  std::size_t i = detail::checkIndex(dimName(dim), sizes_[dim], index);
  std::vector<std::size_t> sizes = sizes_;
  std::vector<std::size_t> strides = strides_;
  sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(dim));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(dim));
  return inherit(Slice(offset_ + i * strides_[dim], std::move(sizes), std::move(strides)));
}

Slice Slice::split(std::size_t dim, const std::vector<std::size_t>& parts) const {
  checkDim(*this, dim);
  std::string what = "split of " + dimName(dim) + " (size " + std::to_string(sizes_[dim]) + ")";
  if (parts.empty()) throw ConfigError(what + " into no dimensions");
  std::size_t product = 1;
  std::string product_text;
  bool overflow = false;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == 0) throw ConfigError(what + ": part " + std::to_string(i) + " has size 0");
    overflow = overflow || __builtin_mul_overflow(product, parts[i], &product);
    product_text += (i > 0 ? " x " : "") + std::to_string(parts[i]);
  }
  if (overflow || product != sizes_[dim]) {
    throw ConfigError(what + " into " + product_text + " = " +
                      (overflow ? "more than std::size_t" : std::to_string(product)) +
                      " does not match");
  }
  // Row-major within the old dimension: the last part keeps its stride.
  std::vector<std::size_t> part_strides(parts.size());
  std::size_t stride = strides_[dim];
  for (std::size_t i = parts.size(); i-- > 0;) {
    part_strides[i] = stride;
    if (i > 0 && __builtin_mul_overflow(stride, parts[i], &stride)) {
      throw ConfigError(what + ": the strides of its parts exceed std::size_t");
    }
  }
  std::vector<std::size_t> sizes = sizes_;
  std::vector<std::size_t> strides = strides_;
  auto pos = static_cast<std::ptrdiff_t>(dim);
  sizes.erase(sizes.begin() + pos);
  strides.erase(strides.begin() + pos);
  sizes.insert(sizes.begin() + pos, parts.begin(), parts.end());
  strides.insert(strides.begin() + pos, part_strides.begin(), part_strides.end());
  return inherit(Slice(offset_, std::move(sizes), std::move(strides)));
}

Slice Slice::flatten() const {
  auto flat = detail::flattenSlice(*this);
  if (!flat) {
    throw ConfigError("cannot flatten slice " + toString() +
                      ": its ranks are not evenly spaced in row-major order");
  }
  return inherit(*flat);
}

std::string Slice::toString() const {
  return "{offset=" + std::to_string(offset_) + ", sizes=" + detail::listString(sizes_) +
         ", strides=" + detail::listString(strides_) +
         (members_ ? ", of ranks " + detail::listString(members_->ranks) : "") + "}";
}

std::ostream& operator<<(std::ostream& out, const Slice& slice) { return out << slice.toString(); }

std::size_t Slice::indexOf(std::size_t rank) const {
  auto index = findIndex(rank);
  if (!index) throw notAMember(rank, *this);
  return *index;
}

std::size_t Slice::rankAt(std::size_t index) const {
  if (index >= size()) {
    throw ConfigError("position " + std::to_string(index) + " in a slice of " +
                      std::to_string(size()) + " ranks");
  }
  std::size_t position = offset_;  // at most offset + span: checked in the constructor
  for (std::size_t d = dims(); d-- > 0;) {
    position += index % sizes_[d] * strides_[d];
    index /= sizes_[d];
  }
  return rankOf(position);
}

}  // namespace crown::mesh
