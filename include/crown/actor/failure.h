// A failure as it travels between processes: a handler's exception, a
// missing actor, a lost process. Requests carry one back to their caller;
// casts carry one per failed member (mesh layer). A plain value: any thread.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "crown/common/error.h"

namespace crown::detail {

struct RemoteFailure {
  enum Category : std::uint8_t {
    kRaised = 0,        ///< a handler threw: RemoteError
    kActorStopped = 1,  ///< no such actor: ActorStopped
    kProcessLost = 2,   ///< its process was lost: ProcessLost
    kOther = 3,         ///< a crown::Error of another kind, as Error
    kActorFailed = 4,   ///< the actor died (message: the cause): ActorFailed
  };
  std::uint8_t category = kRaised;
  std::string type;     ///< the exception's type name (kRaised)
  std::string message;  ///< what(), or the handler's message (kRaised)
  std::string actor;    ///< the actor that raised or died (kRaised, kActorFailed)
  std::string host;     ///< the lost process's or dead actor's host
  Rank rank = 0;        ///< where it was raised, or the lost rank

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& category& type& message& actor& host& rank;
  }
};

/// The type name a kFailure reply carries its RemoteFailure under.
inline constexpr const char* kRemoteFailureType = "crown::RemoteFailure";

/// The wire form of an exception (RemoteError, ProcessLost, ActorStopped and
/// ActorFailed keep their kind; anything else becomes kOther with its message).
RemoteFailure describeFailure(std::exception_ptr error, Rank rank);

/// The exception a caller sees: RemoteError, ActorStopped, ProcessLost,
/// ActorFailed or Error.
std::exception_ptr toException(const RemoteFailure& failure);

}  // namespace crown::detail
