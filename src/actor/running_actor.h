// Which actor, of which Proc, this thread runs a handler for: what
// Actor::current(), actingActor() and Proc::current() answer. Mailboxes set
// it for each handler's run through RunningActor.
#pragma once

#include <optional>

#include "crown/actor/actor.h"

namespace crown {
class Proc;
}

namespace crown::detail {

/// The actor whose handler this thread runs, and its Proc; null outside handlers.
Actor* runningActor();
Proc* runningProc();

/// For its scope, this thread runs a handler of `actor` on `proc`, and acts
/// for that actor alone, whatever it acted for outside (ActingAs); the outer
/// state is back when it ends.
class RunningActor {
 public:
  RunningActor(Actor& actor, Proc& proc);
  ~RunningActor();
  RunningActor(const RunningActor&) = delete;
  RunningActor& operator=(const RunningActor&) = delete;

 private:
  Actor* outerActor_;
  Proc* outerProc_;
  std::optional<ActorId> outerActing_;
};

}  // namespace crown::detail
