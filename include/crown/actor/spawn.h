// Spawning actors on any rank by registered type. The registration is
// implicit: naming spawn<A>(args...) anywhere in a program instantiates a
// factory for A with those argument types, registered at static
// initialisation on every rank that runs the program (SPMD), so the rank
// that receives the spawn can construct A from the serialized arguments.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "crown/actor/ref.h"

namespace crown {

namespace detail {

using ActorFactory = std::function<std::unique_ptr<Actor>(const wire::Bytes& args)>;

void registerActorFactory(const std::string& key, ActorFactory factory);
/// nullptr when no factory has this key.
const ActorFactory* findActorFactory(const std::string& key);
/// Runs the factory `key` on `args` on this rank: throws crown::Error naming
/// the actor, the factory and the rank when there is no such factory or the
/// constructor throws.
std::unique_ptr<Actor> constructActor(const std::string& key, const std::string& name,
                                      const wire::Bytes& args, Rank rank);

template <class A, class... Args>
struct ActorFactoryRegistration {
  static std::string key() {
    std::string key = wire::messageName<A>() + "(";
    ((key += wire::messageName<Args>() + ","), ...);
    return key + ")";
  }
  static inline const bool registered =
      (registerActorFactory(key(),
                            [](const wire::Bytes& bytes) {
                              auto args = wire::unpackValues<Args...>(bytes);
                              return std::apply(
                                  [](auto&... values) -> std::unique_ptr<Actor> {
                                    return std::make_unique<A>(std::move(values)...);
                                  },
                                  args);
                            }),
       true);
};

}  // namespace detail

/// What the proc agent receives: which factory, the actor's name, the arguments.
struct SpawnActor {
  std::string factory;
  std::string name;
  wire::Bytes args;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& factory& name& args;
  }
};

/// Spawns A(args...) on `rank` under `name`; the future completes once the
/// constructor has run there (or fails with its exception as RemoteError).
template <class A, class... Args>
Future<ActorRef<A>> spawnOn(Rank rank, const std::string& name, Args&&... args) {
  static_assert(std::is_base_of_v<Actor, A>, "spawn<A>: A must derive from crown::Actor");
  using Registration = detail::ActorFactoryRegistration<A, std::decay_t<Args>...>;
  (void)Registration::registered;  // odr-use: instantiates the factory on every rank
  SpawnActor message{Registration::key(), name, wire::packValues(args...)};
  return Proc::current()
      .request<std::uint64_t>(ActorId{rank, kAgentLocalId}, message)
      .then([rank](Future<std::uint64_t> local) {
        return ActorRef<A>(ActorId{rank, local.get()});
      });
}

}  // namespace crown
