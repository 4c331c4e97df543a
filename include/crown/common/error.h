// crown's error hierarchy. Setup APIs (bootstrap, spawn) and futures throw
// these; async paths (transport, delivery) pass them as values instead.
// Thread-safe: plain value types.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace crown {

using Rank = std::uint32_t;

/// Base of every error crown throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CROWN_* setting or an argument has a value crown cannot use.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A message over CROWN_MAX_FRAME_BYTES, refused by its sender before it
/// left (FLO-1): nothing else is harmed.
class MessageTooLarge : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// MPI or fabric bootstrap failed (a rank cannot listen, a peer never connects).
class BootstrapError : public Error {
 public:
  using Error::Error;
};

/// Bytes that do not form a valid frame, envelope or payload.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// The handler of a request threw. Carries the remote exception's type name,
/// message, and where it ran.
class RemoteError : public Error {
 public:
  RemoteError(std::string type, std::string message, Rank rank, std::string actor);
  const std::string& remoteType() const { return type_; }
  const std::string& remoteMessage() const { return message_; }
  Rank rank() const { return rank_; }
  const std::string& actor() const { return actor_; }

 private:
  std::string type_;
  std::string message_;
  Rank rank_;
  std::string actor_;
};

/// The process hosting the destination was lost (link closed, process died).
class ProcessLost : public Error {
 public:
  ProcessLost(Rank rank, std::string host, std::string reason);
  Rank rank() const { return rank_; }
  const std::string& host() const { return host_; }
  /// Why it was lost ("connection reset", "no heartbeat for 5000 ms").
  const std::string& reason() const { return reason_; }

 private:
  Rank rank_;
  std::string host_;
  std::string reason_;
};

/// A request or wait outlived its deadline.
class Timeout : public Error {
 public:
  using Error::Error;
};

/// The destination actor does not exist (never spawned, or stopped).
class ActorStopped : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throwCheckFailed(const char* file, int line, const std::string& what);
}  // namespace detail

}  // namespace crown

/// Throws crown::Error with file:line when cond is false. The message is any
/// expression convertible to std::string.
#define CROWN_CHECK(cond, message)                                                 \
  do {                                                                             \
    if (!(cond)) ::crown::detail::throwCheckFailed(__FILE__, __LINE__, (message)); \
  } while (0)
