#include "crown/mesh/reducer.h"

#include "crown/common/registry.h"

namespace crown::mesh::detail {

void registerReducer(const std::string& key, Reducer reducer) {
  crown::detail::Registry<Reducer>::instance().add(key, std::move(reducer));
}

const Reducer* findReducer(const std::string& key) {
  return crown::detail::Registry<Reducer>::instance().find(key);
}

}  // namespace crown::mesh::detail
