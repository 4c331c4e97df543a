// The thread's running actor (running_actor.h), and the public questions
// about it: Actor::current(), ActingAs and actingActor().
#include "actor/running_actor.h"

#include <utility>

#include "crown/actor/proc.h"

namespace crown {

namespace {
thread_local Proc* t_currentProc = nullptr;  // the Proc running a handler on this thread
thread_local Actor* t_currentActor = nullptr;
thread_local std::optional<ActorId> t_actingAs;  // the innermost ActingAs of this thread
}  // namespace

const Actor* Actor::current() { return t_currentActor; }

ActingAs::ActingAs(const ActorId& actor) : outer_(std::exchange(t_actingAs, actor)) {}

ActingAs::~ActingAs() { t_actingAs = outer_; }

std::optional<ActorId> actingActor() {
  if (t_actingAs) return t_actingAs;
  if (t_currentActor && t_currentActor->id().local >= kFirstActorLocalId)
    return t_currentActor->id();
  return std::nullopt;
}

namespace detail {

Actor* runningActor() { return t_currentActor; }
Proc* runningProc() { return t_currentProc; }

RunningActor::RunningActor(Actor& actor, Proc& proc)
    : outerActor_(std::exchange(t_currentActor, &actor)),
      outerProc_(std::exchange(t_currentProc, &proc)),
      outerActing_(std::exchange(t_actingAs, std::nullopt)) {}

RunningActor::~RunningActor() {
  t_currentActor = outerActor_;
  t_currentProc = outerProc_;
  t_actingAs = outerActing_;
}

}  // namespace detail
}  // namespace crown
