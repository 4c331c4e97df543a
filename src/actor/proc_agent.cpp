#include "actor/proc_agent.h"

#include <map>
#include <mutex>

#include "crown/actor/agent.h"
#include "crown/actor/proc.h"
#include "crown/actor/spawn.h"

namespace crown::detail {
namespace {

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<std::string, ActorFactory>& registry() {
  static std::map<std::string, ActorFactory> factories;
  return factories;
}

}  // namespace

void registerActorFactory(const std::string& key, ActorFactory factory) {
  std::lock_guard lock(registryMutex());
  registry().emplace(key, std::move(factory));
}

const ActorFactory* findActorFactory(const std::string& key) {
  std::lock_guard lock(registryMutex());
  auto it = registry().find(key);
  return it == registry().end() ? nullptr : &it->second;
}

ProcAgent::ProcAgent(Proc& proc) {
  handle<agent::Ping>([&proc](const agent::Ping&) { return proc.rank(); });
  handle<SpawnActor>([&proc](const SpawnActor& spawn) {
    const ActorFactory* factory = findActorFactory(spawn.factory);
    if (!factory) {
      throw Error("no actor factory " + spawn.factory + " on rank " + std::to_string(proc.rank()) +
                  ": spawn needs the same program on every rank");
    }
    std::unique_ptr<Actor> actor;
    try {
      actor = (*factory)(spawn.args);
    } catch (const std::exception& e) {
      throw Error("constructor of '" + spawn.name + "' (" + spawn.factory + ") threw " +
                  wire::demangle(typeid(e).name()) + ": " + e.what());
    }
    return proc.spawnLocal(std::move(actor), spawn.name).local;
  });
  handle<agent::StopActor>([&proc](const agent::StopActor& stop) { proc.stopLocal(stop.local); });
  handle<agent::Shutdown>([&proc](const agent::Shutdown& shutdown) {
    proc.requestShutdown(shutdown.code, shutdown.ranksLost);
  });
}

}  // namespace crown::detail
