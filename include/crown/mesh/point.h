// Where a mesh actor sits: the shape of the mesh it was spawned as part of,
// and its own rank in it. Any thread.
#pragma once

#include <map>
#include <string>

#include "crown/mesh/shape.h"

namespace crown::mesh {

struct Point {
  Shape shape;  ///< the whole mesh the actor belongs to
  std::size_t rank = 0;

  /// label -> index: {"hosts": 1, "procs": 2}.
  std::map<std::string, std::size_t> coordinates() const { return shape.coordinates(rank); }
  /// This actor's index along one dimension.
  std::size_t operator[](const std::string& label) const { return coordinates().at(label); }
};

/// The point of the actor this thread runs (inside a handler or its
/// constructor). Throws crown::Error outside a mesh actor.
Point here();

}  // namespace crown::mesh
