// Live status of every rank (issue 15, `crown status`): the debug module's
// agent (stacks.h) answers a StatusRequest with what its proc holds and has
// done, and this process's memory. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/wire/serialize.h"

namespace crown::debug {

struct StatusRequest {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

struct RankStatus {
  Rank rank = 0;
  std::string host;
  int pid = 0;
  std::uint64_t rssBytes = 0;
  std::uint64_t actors = 0;            ///< hosted, crown's system agents included
  std::uint64_t queued = 0;            ///< messages waiting in mailboxes
  std::uint64_t requestsInFlight = 0;  ///< sent, not yet answered
  std::uint64_t handled = 0;           ///< messages handled since start
  std::string error;                   ///< why it did not answer ("" when it did)
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& host& pid& rssBytes& actors& queued& requestsInFlight& handled& error;
  }
};

/// The status of `ranks`, asked of all at once; one that does not answer
/// within `timeout` (or is lost) has `error` set. Any thread.
std::vector<RankStatus> collectStatus(Proc& proc, const std::vector<Rank>& ranks,
                                      std::chrono::milliseconds timeout);

}  // namespace crown::debug

CROWN_MESSAGE(crown::debug::StatusRequest, "crown::StatusRequest");
CROWN_MESSAGE(crown::debug::RankStatus, "crown::RankStatus");
