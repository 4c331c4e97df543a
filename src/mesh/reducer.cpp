// The reducer registry (reducer.h): reducers by exact key, then families of
// reducers by key prefix.
#include "crown/mesh/reducer.h"

#include <mutex>
#include <utility>
#include <vector>

#include "crown/common/registry.h"

namespace crown::mesh::detail {
namespace {

struct Families {
  std::mutex mutex;
  std::vector<std::pair<std::string, ReducerResolver>> byPrefix;

  static Families& instance() {
    static Families families;
    return families;
  }
};

}  // namespace

void registerReducer(const std::string& key, Reducer reducer) {
  crown::detail::Registry<Reducer>::instance().add(key, std::move(reducer));
}

void registerReducerFamily(const std::string& prefix, ReducerResolver resolve) {
  auto& families = Families::instance();
  std::lock_guard lock(families.mutex);
  for (const auto& family : families.byPrefix)
    if (family.first == prefix) return;
  families.byPrefix.emplace_back(prefix, std::move(resolve));
}

std::shared_ptr<const Reducer> findReducer(const std::string& key) {
  if (const Reducer* registered = crown::detail::Registry<Reducer>::instance().find(key)) {
    // Registry entries never move nor go: a pointer that owns nothing.
    return std::shared_ptr<const Reducer>(std::shared_ptr<const Reducer>(), registered);
  }
  ReducerResolver resolve;
  {
    auto& families = Families::instance();
    std::lock_guard lock(families.mutex);
    for (const auto& family : families.byPrefix) {
      if (key.compare(0, family.first.size(), family.first) == 0) {
        resolve = family.second;
        break;
      }
    }
  }
  // Outside the lock: a resolver may take its time (and the GIL).
  return resolve ? resolve(key) : nullptr;
}

}  // namespace crown::mesh::detail
