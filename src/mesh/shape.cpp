#include "crown/mesh/shape.h"

#include <algorithm>
#include <ostream>
#include <set>

#include "crown/common/error.h"
#include "mesh/checks.h"

namespace crown::mesh {

namespace {

std::string quoted(const std::string& label) { return "'" + label + "'"; }
std::string dimName(const std::string& label) { return "dimension " + quoted(label); }

std::string labelList(const std::vector<std::string>& labels) {
  std::string out = "[";
  for (std::size_t i = 0; i < labels.size(); ++i) out += (i > 0 ? ", " : "") + labels[i];
  return out + "]";
}

// Every label non-empty and distinct: a label is how a dimension is found.
void checkLabels(const std::vector<std::string>& labels) {
  std::set<std::string> seen;
  for (std::size_t d = 0; d < labels.size(); ++d) {
    if (labels[d].empty()) {
      throw ConfigError("dimension " + std::to_string(d) + " of shape labels " + labelList(labels) +
                        " has an empty label");
    }
    if (!seen.insert(labels[d]).second) {
      throw ConfigError(dimName(labels[d]) + " appears twice in shape labels " + labelList(labels));
    }
  }
}

std::vector<std::size_t> checkedSizes(const std::vector<Dim>& dims) {
  std::vector<std::size_t> sizes;
  for (const auto& [label, size] : dims) {
    if (size == 0) {
      throw ConfigError(dimName(label) + " has size 0; every dimension needs at least one element");
    }
    sizes.push_back(size);
  }
  return sizes;
}

std::vector<std::string> labelsOf(const std::vector<Dim>& dims) {
  std::vector<std::string> labels;
  for (const auto& dim : dims) labels.push_back(dim.first);
  return labels;
}

}  // namespace

Shape::Shape(const std::vector<Dim>& dims) {
  // Labels first, so that a repeated label is reported as such even when a
  // size is also wrong.
  labels_ = labelsOf(dims);
  checkLabels(labels_);
  slice_ = Slice::rowMajor(checkedSizes(dims));
}

Shape::Shape(std::vector<std::string> labels, Slice slice)
    : labels_(std::move(labels)), slice_(std::move(slice)) {
  if (labels_.size() != slice_.dims()) {
    throw ConfigError("a shape needs one label per dimension; got labels " + labelList(labels_) +
                      " for the " + std::to_string(slice_.dims()) + "-dimensional slice " +
                      slice_.toString());
  }
  checkLabels(labels_);
}

bool Shape::hasDim(const std::string& label) const {
  return std::find(labels_.begin(), labels_.end(), label) != labels_.end();
}

std::size_t Shape::dim(const std::string& label) const {
  auto it = std::find(labels_.begin(), labels_.end(), label);
  if (it == labels_.end()) {
    throw ConfigError("no dimension " + quoted(label) + " in shape " + toString());
  }
  return static_cast<std::size_t>(it - labels_.begin());
}

std::size_t Shape::size(const std::string& label) const { return slice_.sizes()[dim(label)]; }

std::vector<Dim> Shape::sizes() const {
  std::vector<Dim> out;
  for (std::size_t d = 0; d < labels_.size(); ++d) out.emplace_back(labels_[d], slice_.sizes()[d]);
  return out;
}

std::size_t Shape::rank(const std::map<std::string, std::size_t>& coords) const {
  for (const auto& entry : coords) dim(entry.first);  // an unknown label throws, naming it
  std::vector<std::size_t> position(labels_.size());
  for (std::size_t d = 0; d < labels_.size(); ++d) {
    auto it = coords.find(labels_[d]);
    if (it == coords.end()) {
      throw ConfigError("coordinates for shape " + toString() + " miss " + dimName(labels_[d]));
    }
    if (it->second >= slice_.sizes()[d]) {
      throw ConfigError(dimName(labels_[d]) + " has size " + std::to_string(slice_.sizes()[d]) +
                        "; index " + std::to_string(it->second) + " is out of range");
    }
    position[d] = it->second;
  }
  return slice_.location(position);
}

std::map<std::string, std::size_t> Shape::coordinates(std::size_t rank) const {
  if (!slice_.contains(rank)) {
    throw ConfigError("rank " + std::to_string(rank) + " is not in shape " + toString() +
                      " (slice " + slice_.toString() + ")");
  }
  std::vector<std::size_t> position = slice_.coordinates(rank);
  std::map<std::string, std::size_t> out;
  for (std::size_t d = 0; d < labels_.size(); ++d) out.emplace(labels_[d], position[d]);
  return out;
}

Shape Shape::at(const std::string& label, std::int64_t index) const {
  std::size_t d = dim(label);
  detail::checkIndex(dimName(label), slice_.sizes()[d], index);  // so the message has the label
  std::vector<std::string> labels = labels_;
  labels.erase(labels.begin() + static_cast<std::ptrdiff_t>(d));
  return Shape(std::move(labels), slice_.at(d, index));
}

Shape Shape::range(const std::string& label, std::int64_t begin, std::int64_t end,
                   std::int64_t step) const {
  std::size_t d = dim(label);
  detail::checkRange(dimName(label), slice_.sizes()[d], begin, end, step);
  return Shape(labels_, slice_.select(d, begin, end, step));
}

Shape Shape::select(const std::map<std::string, Selector>& selectors) const {
  for (const auto& entry : selectors) dim(entry.first);
  // By label, so the removal of one dimension does not move the others.
  Shape out = *this;
  for (const auto& [label, selector] : selectors) {
    if (const auto* index = std::get_if<std::int64_t>(&selector)) {
      out = out.at(label, *index);
    } else {
      out = out.range(label, std::get<Range>(selector));
    }
  }
  return out;
}

Shape Shape::flatten(const std::string& label) const {
  if (label.empty())
    throw ConfigError("cannot flatten shape " + toString() + " into an empty label");
  auto flat = detail::flattenSlice(slice_);
  if (!flat) {
    throw ConfigError("cannot flatten shape " + toString() + " into " + quoted(label) +
                      ": its ranks are not evenly spaced in row-major order (slice " +
                      slice_.toString() + ")");
  }
  return Shape({label}, std::move(*flat));
}

Shape Shape::rename(const std::string& from, const std::string& to) const {
  std::size_t d = dim(from);
  if (to.empty()) {
    throw ConfigError("cannot rename " + quoted(from) + " of shape " + toString() +
                      " to an empty label");
  }
  if (to != from && hasDim(to)) {
    throw ConfigError("cannot rename " + quoted(from) + " to " + quoted(to) + ": shape " +
                      toString() + " already has " + dimName(to));
  }
  std::vector<std::string> labels = labels_;
  labels[d] = to;
  return Shape(std::move(labels), slice_);
}

Shape Shape::split(const std::string& label, const std::vector<Dim>& parts) const {
  std::size_t d = dim(label);
  std::size_t size = slice_.sizes()[d];
  std::string what = "split of " + quoted(label) + " (size " + std::to_string(size) + ")";
  if (parts.empty()) throw ConfigError(what + " into no dimensions");
  std::string product_text;
  std::size_t product = 1;
  bool overflow = false;
  for (const auto& [part, part_size] : parts) {
    if (part_size == 0) throw ConfigError(what + ": part " + quoted(part) + " has size 0");
    overflow = overflow || __builtin_mul_overflow(product, part_size, &product);
    product_text += (product_text.empty() ? "" : " x ") + part + "=" + std::to_string(part_size);
  }
  if (overflow || product != size) {
    throw ConfigError(what + " into " + product_text + " = " +
                      (overflow ? "more than std::size_t" : std::to_string(product)) +
                      " does not match");
  }
  std::vector<std::string> labels = labels_;
  auto pos = labels.erase(labels.begin() + static_cast<std::ptrdiff_t>(d));
  std::vector<std::string> part_labels = labelsOf(parts);
  labels.insert(pos, part_labels.begin(), part_labels.end());
  std::vector<std::size_t> part_sizes;
  for (const auto& part : parts) part_sizes.push_back(part.second);
  // checkLabels (in the constructor) reports a part label that repeats.
  return Shape(std::move(labels), slice_.split(d, part_sizes));
}

std::string Shape::toString() const {
  std::string out = "{";
  for (std::size_t d = 0; d < labels_.size(); ++d) {
    out += (d > 0 ? ", " : "") + labels_[d] + "=" + std::to_string(slice_.sizes()[d]);
  }
  return out + "}";
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape.toString(); }

}  // namespace crown::mesh
