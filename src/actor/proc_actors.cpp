// The Proc's hosted actors: spawning them, stopping them, a death, and what
// each part forgets of an actor that is gone (proc_impl.h has the parts).
#include "actor/proc_impl.h"

namespace crown {

ActorId Proc::spawnLocal(std::unique_ptr<Actor> actor, std::string name) {
  return spawnLocalAt(impl_->nextLocal.fetch_add(1), std::move(actor), std::move(name));
}

ActorId Proc::spawnLocalAt(std::uint64_t local, std::unique_ptr<Actor> actor, std::string name) {
  // The modules hear actorStarted from the mailboxes: now, or after the
  // actor's first turn (Actor::onStart) when it has one.
  return impl_->mailboxes.host(std::move(actor), local, std::move(name));
}

void Proc::setRawAgent(std::uint64_t local, RawHandler handler) {
  CROWN_CHECK(impl_->installing, "raw agents are set from Proc::Module::install only");
  CROWN_CHECK(local > kAgentLocalId && local < kFirstActorLocalId,
              "raw agents take the system ids 2.." + std::to_string(kFirstActorLocalId - 1));
  impl_->router.setRawAgent(local, std::move(handler));
}

void Proc::stopLocal(std::uint64_t local) { removeLocal(local, nullptr); }

bool Proc::stopLocalIfStarting(std::uint64_t local) { return removeLocal(local, nullptr, true); }

void Proc::failLocal(std::uint64_t local, const ActorFailed& death) {
  auto failure = detail::describeFailure(std::make_exception_ptr(death), death.rank());
  removeLocal(local, &failure);
  for (Module* module : impl_->modules)
    module->actorFailed(ActorId{impl_->options.rank, local}, death.actor(), death.cause());
}

bool Proc::removeLocal(std::uint64_t local, const detail::RemoteFailure* death, bool onlyStarting) {
  CROWN_CHECK(local != kAgentLocalId, "the proc agent cannot be stopped");
  auto held = impl_->ports->holdsOf(local);  // its handles may go with it in remove()
  if (!impl_->mailboxes.remove(local, death, onlyStarting)) return false;
  impl_->sequencer.forgetSender({impl_->options.rank, local});
  impl_->flow.forgetActor({impl_->options.rank, local});
  // DLV-1: its ports fail, and the ports it held hear it went (port.h).
  auto gone = death ? detail::toException(*death)
                    : std::make_exception_ptr(ActorStopped(
                          "actor " + wire::toString({impl_->options.rank, local}) + " stopped"));
  impl_->ports->ownerGone(local, gone);
  impl_->ports->holderGone(held, gone);
  for (Module* module : impl_->modules) module->actorStopped(local);
  return true;
}

void Proc::forgetDestination(std::uint64_t local) {
  impl_->sequencer.forgetDestination(local);
  impl_->flow.forgetDestination(local);
}

void Proc::forgetDestination(std::uint64_t local, const std::vector<std::size_t>& ranks) {
  impl_->sequencer.forgetDestination(local, ranks);
  impl_->flow.forgetDestination(local, &ranks);
}

}  // namespace crown
