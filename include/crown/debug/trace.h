// The merged trace (issue 15, CROWN_TRACE=trace.json): at the end of a
// traced job the controller asks every live rank's debug agent for what it
// recorded (crown/common/trace.h), in chunks, and writes one file in the
// Trace Event Format that chrome://tracing and ui.perfetto.dev read: a
// process track per rank ("rank R (host)"), a thread track per thread, its
// clocks moved onto rank 0's by the offsets measured at bootstrap.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/common/trace.h"
#include "crown/wire/serialize.h"

namespace crown::debug {

struct TraceRequest {
  std::uint64_t chunk = 0;  ///< 0 takes what the rank recorded; later chunks read on
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& chunk;
  }
};

struct RankTrace {
  Rank rank = 0;
  std::string host;
  std::vector<trace::Event> events;
  std::vector<std::pair<std::uint32_t, std::string>> threads;  ///< in chunk 0
  std::uint64_t dropped = 0;                                   ///< in chunk 0
  bool more = false;  ///< another chunk follows
  std::string error;  ///< why it did not answer ("" when it did)
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank& host& events& threads& dropped& more& error;
  }
};

/// Every rank's trace (`ranks`, this one included), asked for in chunks;
/// a rank that does not answer within `timeout` has `error` set.
std::vector<RankTrace> collectTrace(Proc& proc, const std::vector<Rank>& ranks,
                                    std::chrono::milliseconds timeout);

/// The Trace Event Format document of `traces`: rank r's times are moved
/// by -offsetsNs[r] (its clock minus rank 0's; missing: 0) and start from
/// the earliest event. Returns the JSON text.
std::string chromeTrace(const std::vector<RankTrace>& traces,
                        const std::vector<std::int64_t>& offsetsNs);

struct TraceWritten {
  std::size_t ranks = 0;   ///< that answered
  std::size_t events = 0;
};

/// Collects every live rank's trace and writes it to `path` (through a
/// temporary file, renamed, so a reader never sees half of one). Throws
/// crown::Error when it cannot write.
TraceWritten writeTrace(Proc& proc, const std::string& path,
                       const std::vector<std::int64_t>& offsetsNs,
                       std::chrono::milliseconds timeout);

}  // namespace crown::debug

namespace boost::serialization {
template <class Archive>
void serialize(Archive& archive, crown::trace::Event& e, unsigned) {
  archive& e.phase& e.category& e.name& e.startNs& e.durationNs& e.id& e.thread& e.detail;
}
}  // namespace boost::serialization

CROWN_MESSAGE(crown::debug::TraceRequest, "crown::TraceRequest");
CROWN_MESSAGE(crown::debug::RankTrace, "crown::RankTrace");
