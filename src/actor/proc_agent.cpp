#include "actor/proc_agent.h"

#include "crown/actor/agent.h"
#include "crown/actor/lost_messages.h"
#include "crown/actor/proc.h"
#include "crown/actor/spawn.h"
#include "crown/common/registry.h"

namespace crown::detail {

void registerActorFactory(const std::string& key, ActorFactory factory) {
  Registry<ActorFactory>::instance().add(key, std::move(factory));
}

const ActorFactory* findActorFactory(const std::string& key) {
  return Registry<ActorFactory>::instance().find(key);
}

std::unique_ptr<Actor> constructActor(const std::string& key, const std::string& name,
                                      const wire::Bytes& args, Rank rank) {
  const ActorFactory* factory = findActorFactory(key);
  if (!factory) {
    throw Error("no actor factory " + key + " on rank " + std::to_string(rank) +
                ": spawn needs the same program on every rank");
  }
  try {
    return (*factory)(args);
  } catch (const UserCodeError& e) {  // its own report (a traceback) says what happened
    throw UserCodeError("the constructor of '" + name + "' on rank " + std::to_string(rank) +
                        " raised:\n" + e.what());
  } catch (const std::exception& e) {
    throw Error("constructor of '" + name + "' (" + key + ") threw " +
                wire::demangle(typeid(e).name()) + ": " + e.what());
  }
}

ProcAgent::ProcAgent(Proc& proc, std::function<void(const LostMessages&)> onLost) {
  handle<agent::Ping>([&proc](const agent::Ping&) { return proc.rank(); });
  handle<SpawnActor>([&proc](const SpawnActor& spawn) {
    auto actor = constructActor(spawn.factory, spawn.name, spawn.args, proc.rank());
    return proc.spawnLocal(std::move(actor), spawn.name).local;
  });
  handle<agent::StopActor>([&proc](const agent::StopActor& stop) { proc.stopLocal(stop.local); });
  handle<LostMessages>([onLost = std::move(onLost)](const LostMessages& lost) { onLost(lost); });
}

}  // namespace crown::detail
