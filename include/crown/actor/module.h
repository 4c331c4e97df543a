// Proc::Module: how a layer above the actor kernel plugs into every Proc
// (CAF's actor_system::module). The mesh layer, bootstrap's lifecycle, and
// the tensor, RDMA, supervision and debug layers to come are each a module:
// a Proc is built with a list of module factories, owns one instance of
// each (so per-Proc state lives in the module, never in a process-wide map
// keyed by Proc), and tells them of its own events.
//
// Every rank builds its Procs with the same modules in the same order, so a
// module claims the same system ids on every rank and can address its peer
// on another rank by them (the cast agent, say).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "crown/actor/proc.h"

namespace crown {

/// Hands out a Proc's system actor ids (between kFlowAgentLocalId and
/// kFirstActorLocalId) to its modules, in install order. Install thread only.
class SystemIds {
 public:
  /// The next free id; throws ConfigError when the system range is used up.
  std::uint64_t claim();

 private:
  std::uint64_t next_ = kFlowAgentLocalId + 1;
};

class Proc::Module {
 public:
  virtual ~Module() = default;

  /// Before the transport starts, so no message can arrive ahead of the
  /// module's agents: claim ids from `ids`, host agents (Proc::spawnLocalAt,
  /// Proc::setRawAgent). `proc` outlives the module.
  virtual void install(Proc& proc, SystemIds& ids) = 0;
  /// After the transport and the pool have started.
  virtual void start() {}
  /// At the start of Proc::stop, in reverse install order, while links are
  /// still up: links lost from here on are expected.
  virtual void stop() {}
  /// A peer's link died; its pending requests have failed already. A pool thread.
  virtual void peerLost(Rank /*peer*/, const std::string& /*reason*/) {}
  /// Actor `local` of this Proc is hosted from now on (Proc::spawnLocalAt),
  /// its constructor done: the thread that hosted it; for an actor with a
  /// first turn (Actor::onStart), the thread that ran it, once it returned
  /// (not at all when the actor died of it).
  virtual void actorStarted(std::uint64_t /*local*/) {}
  /// Actor `local` of this Proc was stopped; its id is not reused.
  virtual void actorStopped(std::uint64_t /*local*/) {}
  /// An actor of this Proc failed where no caller hears of it (a one-way
  /// message, a send, a broadcast, a port, whose handler threw), or a
  /// handler threw ActorFatal. A user actor (not a system agent) has died
  /// by then (Proc::failLocal). `what` holds the error (for a Python actor,
  /// its traceback). The supervision layer builds on this. The thread that
  /// ran the handler.
  virtual void actorFailed(const ActorId& /*actor*/, const std::string& /*name*/,
                           const std::string& /*what*/) {}
};

}  // namespace crown
