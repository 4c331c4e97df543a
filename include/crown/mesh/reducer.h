// Reducers: how a cast's replies are combined at every hop on their way up
// (sum, min, max, or the user's function), so the sender receives at most k
// messages. A reducer is registered under a key made of its operation's
// and its value's type names the first time a program names it, on every
// rank alike (SPMD), so each hop finds it by the key the cast carries.
// The operation must be associative and commutative: replies are combined
// in arrival order. A family of reducers (Python's, whose keys carry the
// pickled combine function) is registered under a key prefix, and its
// resolver builds the reducer of each key it is asked for. Thread-safe.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "crown/wire/serialize.h"

namespace crown::mesh {

struct Sum {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return a + b;
  }
};
struct Min {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return std::min(a, b);
  }
};
struct Max {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return std::max(a, b);
  }
};

namespace detail {

struct Reducer {
  std::string valueType;  ///< the type name every reply must have
  std::function<wire::Bytes(const wire::Bytes&, const wire::Bytes&)> combine;
};

void registerReducer(const std::string& key, Reducer reducer);

/// Builds the reducer of `key` (which starts with the family's prefix), or
/// nullptr when the key names none. Called once per cast at every hop that
/// folds, on any thread.
using ReducerResolver = std::function<std::shared_ptr<const Reducer>(const std::string& key)>;
/// Every key starting with `prefix` that no registerReducer names goes to
/// `resolve`; the first family registered under a prefix wins. Register it
/// on every rank alike (SPMD), as reducers are.
void registerReducerFamily(const std::string& prefix, ReducerResolver resolve);

/// The reducer registered under key, else the one its family resolves;
/// nullptr when neither knows it.
std::shared_ptr<const Reducer> findReducer(const std::string& key);

template <class T, class Op>
struct ReducerRegistration {
  static std::string key() { return wire::messageName<Op>() + "<" + wire::messageName<T>() + ">"; }
  static inline const bool registered =
      (registerReducer(key(), Reducer{wire::messageName<T>(),
                                      [](const wire::Bytes& a, const wire::Bytes& b) {
                                        return wire::toBytes(static_cast<T>(
                                            Op{}(wire::fromBytes<T>(a), wire::fromBytes<T>(b))));
                                      }}),
       true);
};

}  // namespace detail

/// The key of reducer Op over T, registering it on first use.
template <class T, class Op>
std::string reducerKey() {
  static_assert(std::is_default_constructible_v<Op>,
                "a reducer must be default-constructible (a struct, or a lambda without captures)");
  (void)detail::ReducerRegistration<T, Op>::registered;  // odr-use: registers on every rank
  return detail::ReducerRegistration<T, Op>::key();
}

}  // namespace crown::mesh
