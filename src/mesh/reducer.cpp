#include "crown/mesh/reducer.h"

#include <map>
#include <mutex>

namespace crown::mesh::detail {
namespace {

// Function-local statics: registrations run during static initialisation,
// in any order relative to this file's globals.
std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, Reducer>& registry() {
  static std::map<std::string, Reducer> reducers;
  return reducers;
}

}  // namespace

void registerReducer(const std::string& key, Reducer reducer) {
  std::lock_guard lock(registryMutex());
  registry().emplace(key, std::move(reducer));
}

const Reducer* findReducer(const std::string& key) {
  std::lock_guard lock(registryMutex());
  auto it = registry().find(key);
  return it == registry().end() ? nullptr : &it->second;
}

}  // namespace crown::mesh::detail
