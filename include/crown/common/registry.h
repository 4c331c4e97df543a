// Registry<T>: named entries that a program registers at static
// initialisation (actor factories, reducers), identical on every rank of an
// SPMD program, and looks up by name later. Thread-safe; an entry, once
// added, never moves, so a pointer to it stays valid.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace crown::detail {

template <class T>
class Registry {
 public:
  /// The one registry of T. A function-local static: registrations run at
  /// static initialisation, in any order relative to other files' globals.
  static Registry& instance() {
    static Registry registry;
    return registry;
  }

  /// The first registration of a key wins.
  void add(const std::string& key, T entry) {
    std::lock_guard lock(mutex_);
    entries_.emplace(key, std::move(entry));
  }

  /// nullptr when nothing is registered under key.
  const T* find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, T> entries_;
};

}  // namespace crown::detail
