#include "crown/common/error.h"

namespace crown {

RemoteError::RemoteError(std::string type, std::string message, Rank rank, std::string actor)
    : Error("rank " + std::to_string(rank) + ", actor '" + actor + "'" +
            (type.empty() ? ": " : " raised " + type + ": ") + message),
      type_(std::move(type)),
      message_(std::move(message)),
      rank_(rank),
      actor_(std::move(actor)) {}

ProcessLost::ProcessLost(Rank rank, std::string host, std::string reason)
    : Error("process lost: rank " + std::to_string(rank) + (host.empty() ? "" : " on " + host) +
            ": " + reason),
      rank_(rank),
      host_(std::move(host)),
      reason_(std::move(reason)) {}

ActorFailed::ActorFailed(Rank rank, std::string host, std::string actor, std::string cause)
    : Error("actor '" + actor + "' on rank " + std::to_string(rank) +
            (host.empty() ? "" : " (" + host + ")") + " has died: " + cause),
      rank_(rank),
      host_(std::move(host)),
      actor_(std::move(actor)),
      cause_(std::move(cause)) {}

namespace detail {
void throwCheckFailed(const char* file, int line, const std::string& what) {
  throw Error(what + " (" + file + ":" + std::to_string(line) + ")");
}
}  // namespace detail

}  // namespace crown
