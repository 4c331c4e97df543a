// Argument checks shared by Slice and Shape, so that a bad index reads the
// same whichever is asked; `what` names the dimension in the message
// ("dimension 1" for a Slice, "dimension 'procs'" for a Shape). Any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "crown/mesh/slice.h"

namespace crown::mesh::detail {

/// index as an unsigned index into a dimension of this size; throws
/// ConfigError when it is outside [0, size).
std::size_t checkIndex(const std::string& what, std::size_t size, std::int64_t index);

/// A range checked against a dimension: its first index, element count and
/// step.
struct CheckedRange {
  std::size_t begin;
  std::size_t size;
  std::size_t step;
};

/// Throws ConfigError for step < 1, begin outside [0, size), or end <= begin;
/// end is clamped to size.
CheckedRange checkRange(const std::string& what, std::size_t size, std::int64_t begin,
                        std::int64_t end, std::int64_t step);

/// The one-dimensional slice with the same ranks in the same order, or none
/// when they are not evenly spaced.
std::optional<Slice> flattenSlice(const Slice& slice);

/// "[2, 4]"
std::string listString(const std::vector<std::size_t>& values);

}  // namespace crown::mesh::detail
