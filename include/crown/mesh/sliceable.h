// Sliceable<Mesh>: the slicing operations every mesh type shares (ProcMesh,
// ActorMesh), each giving a mesh of the same type over a Shape derived from
// its own. Mesh provides shape() and with(Shape).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "crown/mesh/shape.h"

namespace crown::mesh {

template <class Mesh>
class Sliceable {
 public:
  std::size_t size() const { return self().shape().size(); }
  /// The size of one dimension.
  std::size_t size(const std::string& label) const { return self().shape().size(label); }
  std::vector<Dim> sizes() const { return self().shape().sizes(); }

  /// slice({{"hosts", 0}, {"procs", Range{0, 4, 2}}}): an index removes a
  /// dimension, a Range keeps it.
  Mesh slice(const std::map<std::string, Selector>& selectors) const {
    return self().with(self().shape().select(selectors));
  }
  Mesh at(const std::string& label, std::int64_t index) const {
    return self().with(self().shape().at(label, index));
  }
  Mesh range(const std::string& label, const Range& range) const {
    return self().with(self().shape().range(label, range));
  }
  Mesh flatten(const std::string& label) const {
    return self().with(self().shape().flatten(label));
  }
  Mesh rename(const std::string& from, const std::string& to) const {
    return self().with(self().shape().rename(from, to));
  }
  Mesh split(const std::string& label, const std::vector<Dim>& parts) const {
    return self().with(self().shape().split(label, parts));
  }

 private:
  const Mesh& self() const { return static_cast<const Mesh&>(*this); }
};

}  // namespace crown::mesh
