#include "crown/actor/failure.h"

#include "crown/actor/lost_messages.h"
#include "crown/wire/serialize.h"

namespace crown::detail {

RemoteFailure describeFailure(std::exception_ptr error, Rank rank) {
  RemoteFailure failure;
  failure.rank = rank;
  try {
    std::rethrow_exception(error);
  } catch (const RemoteError& e) {
    failure = {RemoteFailure::kRaised, e.remoteType(), e.remoteMessage(), e.actor(), "", e.rank()};
  } catch (const ProcessLost& e) {
    failure = {RemoteFailure::kProcessLost, "", e.reason(), "", e.host(), e.rank()};
  } catch (const ActorStopped& e) {
    failure = {RemoteFailure::kActorStopped, "", e.what(), "", "", rank};
  } catch (const ActorFailed& e) {
    failure = {RemoteFailure::kActorFailed, "", e.cause(), e.actor(), e.host(), e.rank()};
  } catch (const std::exception& e) {
    failure = {RemoteFailure::kOther, wire::demangle(typeid(e).name()), e.what(), "", "", rank};
  } catch (...) {
    failure = {RemoteFailure::kOther, "unknown exception", "not a std::exception", "", "", rank};
  }
  return failure;
}

std::exception_ptr toException(const RemoteFailure& failure) {
  switch (failure.category) {
    case RemoteFailure::kRaised:
      return std::make_exception_ptr(
          RemoteError(failure.type, failure.message, failure.rank, failure.actor));
    case RemoteFailure::kActorStopped:
      return std::make_exception_ptr(ActorStopped(failure.message));
    case RemoteFailure::kProcessLost:
      return std::make_exception_ptr(ProcessLost(failure.rank, failure.host, failure.message));
    case RemoteFailure::kActorFailed:
      return std::make_exception_ptr(
          ActorFailed(failure.rank, failure.host, failure.actor, failure.message));
    default:
      return std::make_exception_ptr(Error(failure.message));
  }
}

}  // namespace crown::detail

namespace crown {

std::string toString(const LostMessages& lost) {
  return std::to_string(lost.count) + " message" + (lost.count == 1 ? "" : "s") + " (numbers " +
         std::to_string(lost.first) + ".." + std::to_string(lost.last) + ") from actor " +
         wire::toString(lost.sender) + " to '" + lost.destName + "' (actor " +
         wire::toString(lost.dest) + ") were lost: given up after the order gap timeout "
         "(CROWN_ORDER_GAP_TIMEOUT_MS); a cast hop that died before forwarding them, beyond "
         "what its parent could resend (CROWN_CAST_RESEND_WINDOW)?";
}

}  // namespace crown
