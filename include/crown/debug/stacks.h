// Stacks of every process (issue 15): the debug layer's module, on every
// rank, answers the controller's StacksRequest with this process's Python
// stacks of every thread and, when asked, its native ones. Python's are
// faulthandler's signal-safe dump (registered by the Python front end on a
// signal of its own, into a file: setPythonStackDump), so they come even
// while a thread holds the GIL in a C loop; the request is served by a C++
// agent that needs no GIL. Native stacks come from eu-stack (elfutils),
// when it is installed. Thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/wire/serialize.h"

namespace crown::debug {

struct StacksRequest {
  bool native = false;  ///< also the native stacks (eu-stack)
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& native;
  }
};

/// One rank's answer.
struct RankStacks {
  Rank rank = 0;
  std::string host;
  int pid = 0;
  std::string python;  ///< faulthandler's dump of every thread; "" when this process has no Python
  std::string native;  ///< eu-stack's output, or why there is none
  std::string error;   ///< the rank did not answer: why (it was lost, or too slow)
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& host& pid& python& native& error;
  }
};

/// The factory to put in Proc::Options::modules.
Proc::ModuleFactory debugModule();

/// This process's Python stacks: on `signal`, faulthandler writes those of
/// every thread to `fd` (a file: written from the start at each dump).
void setPythonStackDump(Proc& proc, int fd, int signal);

/// The stacks of `ranks`, asked of all at once; a rank that does not answer
/// within `timeout` (or is lost) has its `error` set. Any thread.
std::vector<RankStacks> collectStacks(Proc& proc, const std::vector<Rank>& ranks, bool native,
                                      std::chrono::milliseconds timeout);

}  // namespace crown::debug

CROWN_MESSAGE(crown::debug::StacksRequest, "crown::StacksRequest");
CROWN_MESSAGE(crown::debug::RankStacks, "crown::RankStacks");
