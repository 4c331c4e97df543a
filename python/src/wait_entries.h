// What the bindings' waits share (bind_actor.cpp's futures and streams,
// bind_port.cpp's port receivers): a Python timeout in milliseconds, and a
// failed entry as the plain values _calls.py and _ports.py read.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <exception>

#include "crown/actor/failure.h"
#include "crown/mesh/value_mesh.h"

namespace crown::python {

/// `seconds` (a Python timeout) as milliseconds; ValueError when negative.
inline std::chrono::milliseconds toMillis(double seconds) {
  if (seconds < 0) throw pybind11::value_error("a timeout must not be negative");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

/// An entry's error as (kind, message, rank, host, cause), kind one of
/// "raised" (a handler threw), "lost" (its process), "failed" (the actor
/// died; cause: why), "stopped", "dropped" (a port's holder let it go
/// without sending: `dropped`) or "error".
inline pybind11::tuple describeEntry(const std::exception_ptr& error, Rank rank,
                                     bool dropped = false) {
  using Failure = crown::detail::RemoteFailure;
  auto failure = crown::detail::describeFailure(error, rank);
  const char* kind = dropped ? "dropped" : "error";
  switch (failure.category) {
    case Failure::kRaised:
      kind = "raised";
      break;
    case Failure::kActorStopped:
      kind = "stopped";
      break;
    case Failure::kProcessLost:
      kind = "lost";
      break;
    case Failure::kActorFailed:
      kind = "failed";
      break;
    default:
      break;
  }
  std::string cause = failure.category == Failure::kActorFailed ? failure.message : "";
  return pybind11::make_tuple(kind, mesh::detail::describe(error), failure.rank, failure.host,
                              cause);
}

}  // namespace crown::python
