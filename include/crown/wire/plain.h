// CROWN_WIRE_PLAIN: how a value type on a hot path opts out of Boost's
// per-archive class bookkeeping. Header-only; any thread.
#pragma once

#include <boost/serialization/level.hpp>
#include <boost/serialization/tracking.hpp>

/// Serializes T as its fields alone: without the class information Boost
/// writes the first time a class appears in an archive (a version and a
/// tracking flag) and without object tracking, which costs a set insertion
/// for every object saved or loaded. For value types on hot paths (a cast
/// and its result cross every hop of a tree) that are never serialized
/// through a pointer and whose serialize() ignores its version argument.
/// Use at global namespace scope.
#define CROWN_WIRE_PLAIN(T)                                                \
  BOOST_CLASS_IMPLEMENTATION(T, boost::serialization::object_serializable) \
  BOOST_CLASS_TRACKING(T, boost::serialization::track_never)
