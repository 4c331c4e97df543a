// The merged trace's file (crown/debug/trace.h): Trace Event Format, as
// chrome://tracing and Perfetto read it. Times are microseconds from the
// earliest event of the job, on rank 0's clock.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "crown/common/error.h"
#include "crown/debug/trace.h"

namespace crown::debug {
namespace {

// One event as the format has it; an asynchronous span ('A') is a begin
// and an end of its own id, on a track of its own.
void append(nlohmann::json& out, const trace::Event& e, Rank rank, std::int64_t zeroNs) {
  auto micros = [zeroNs](std::int64_t ns) { return static_cast<double>(ns - zeroNs) / 1e3; };
  nlohmann::json one = {{"pid", rank}, {"tid", e.thread}, {"cat", e.category},
                        {"name", e.name}, {"ts", micros(e.startNs)}};
  if (!e.detail.empty()) one["args"] = {{"detail", e.detail}};
  switch (e.phase) {
    case 'X':
      one["ph"] = "X";
      one["dur"] = static_cast<double>(e.durationNs) / 1e3;
      break;
    case 'i':
      one["ph"] = "i";
      one["s"] = "t";  // on its thread's track
      break;
    case 's':
      one["ph"] = "s";
      one["id"] = e.id;
      break;
    case 'f':
      one["ph"] = "f";
      one["bp"] = "e";  // bound to the span that encloses it
      one["id"] = e.id;
      break;
    case 'A': {
      one["ph"] = "b";
      one["id"] = e.id;
      nlohmann::json end = {{"pid", rank}, {"tid", e.thread}, {"cat", e.category},
                            {"name", e.name}, {"ph", "e"}, {"id", e.id},
                            {"ts", micros(e.startNs + e.durationNs)}};
      out.push_back(std::move(one));
      out.push_back(std::move(end));
      return;
    }
    default:
      throw Error(std::string("a trace event of unknown phase '") + e.phase + "'");
  }
  out.push_back(std::move(one));
}

nlohmann::json metadata(const char* what, Rank rank, std::uint32_t thread, nlohmann::json args) {
  return {{"ph", "M"}, {"name", what}, {"pid", rank}, {"tid", thread}, {"args", std::move(args)}};
}

}  // namespace

std::string chromeTrace(const std::vector<RankTrace>& traces,
                        const std::vector<std::int64_t>& offsetsNs) {
  auto offset = [&](Rank rank) { return rank < offsetsNs.size() ? offsetsNs[rank] : 0; };
  std::int64_t zero = std::numeric_limits<std::int64_t>::max();
  for (const RankTrace& t : traces) {
    for (const trace::Event& e : t.events) zero = std::min(zero, e.startNs - offset(t.rank));
  }
  if (zero == std::numeric_limits<std::int64_t>::max()) zero = 0;
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json silent = nlohmann::json::array();
  for (const RankTrace& t : traces) {
    std::string label = "rank " + std::to_string(t.rank) + " (" + t.host + ")";
    events.push_back(metadata("process_name", t.rank, 0, {{"name", label}}));
    events.push_back(metadata("process_sort_index", t.rank, 0, {{"sort_index", t.rank}}));
    if (!t.error.empty()) {
      silent.push_back({{"rank", t.rank}, {"error", t.error}});
      continue;
    }
    for (const auto& [number, name] : t.threads) {
      events.push_back(metadata("thread_name", t.rank, number,
                                {{"name", name.empty() ? "thread " + std::to_string(number) : name}}));
    }
    for (const trace::Event& e : t.events) append(events, e, t.rank, zero + offset(t.rank));
  }
  nlohmann::json document = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  nlohmann::json about = {{"ranks", traces.size()}};
  std::uint64_t dropped = 0;
  for (const RankTrace& t : traces) dropped += t.dropped;
  about["dropped_events"] = dropped;  // past CROWN_TRACE_MAX_EVENTS on some rank
  if (!silent.empty()) about["silent_ranks"] = std::move(silent);
  document["otherData"] = std::move(about);
  return document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TraceWritten writeTrace(Proc& proc, const std::string& path,
                       const std::vector<std::int64_t>& offsetsNs,
                       std::chrono::milliseconds timeout) {
  std::vector<Rank> live;
  for (Rank r = 0; r < proc.size(); ++r) {
    if (r == proc.rank() || proc.alive(r)) live.push_back(r);
  }
  std::vector<RankTrace> traces = collectTrace(proc, live, timeout);
  TraceWritten written;
  for (const RankTrace& t : traces) {
    written.events += t.events.size();
    written.ranks += t.error.empty() ? 1 : 0;
  }
  std::string text = chromeTrace(traces, offsetsNs);
  std::string temporary = path + ".part-" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      std::remove(temporary.c_str());
      throw Error("cannot write the trace to " + temporary + " (CROWN_TRACE)");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw Error("cannot write the trace to " + path + " (CROWN_TRACE)");
  }
  return written;
}

}  // namespace crown::debug
