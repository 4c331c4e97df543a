#include "crown/common/error.h"

namespace crown {

RemoteError::RemoteError(std::string type, std::string message, Rank rank, std::string actor)
    : Error("rank " + std::to_string(rank) + ", actor '" + actor + "' raised " + type + ": " +
            message),
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

namespace detail {
void throwCheckFailed(const char* file, int line, const std::string& what) {
  throw Error(what + " (" + file + ":" + std::to_string(line) + ")");
}
}  // namespace detail

}  // namespace crown
