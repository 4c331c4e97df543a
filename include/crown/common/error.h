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
/// message (type empty: user code whose message names its own error), and
/// where it ran.
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

/// The destination actor died (design.md, failure model): a one-way message's
/// handler threw, or a handler threw ActorFatal. It refuses every message
/// from then on, with this error naming the cause.
class ActorFailed : public Error {
 public:
  ActorFailed(Rank rank, std::string host, std::string actor, std::string cause);
  Rank rank() const { return rank_; }
  const std::string& host() const { return host_; }
  /// The actor's name (its mesh's).
  const std::string& actor() const { return actor_; }
  /// Why it died: the error its handler threw (for Python, the traceback).
  const std::string& cause() const { return cause_; }

 private:
  Rank rank_;
  std::string host_;
  std::string actor_;
  std::string cause_;
};

/// Thrown by a handler whose actor must not live on (a Python BaseException
/// such as SystemExit escaped it): the actor dies as in ActorFailed, and the
/// request it was handling, if any, fails with ActorFailed.
class ActorFatal : public Error {
 public:
  using Error::Error;
};

/// An error raised by user code in another language (Python), whose what()
/// is its own report (a traceback): crown passes it on as it is, with no C++
/// type names around it.
class UserCodeError : public Error {
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
