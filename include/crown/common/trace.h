// Traces (issue 15, CROWN_TRACE=trace.json): spans, instants and flows
// recorded on every rank, each thread into its own buffer, and merged by the
// controller at the end of the job into one Chrome/Perfetto trace
// (crown/debug/trace.h). Off, the default, a recording site costs one
// relaxed load and a branch (trace::on()), and builds nothing.
//
//   trace::Span span;
//   if (trace::on()) [[unlikely]] span.begin("actor", actor.name());
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace crown::trace {

struct Event {
  /// 'X' a span on its thread; 'i' an instant; 's' and 'f' the two ends of
  /// a flow (an arrow from one span to another, on any rank); 'A' an
  /// asynchronous span (its own track: an RDMA transfer ends elsewhere).
  char phase = 'X';
  std::string category;  ///< "actor", "send", "cast", "tensor", "rdma"
  std::string name;
  std::int64_t startNs = 0;  ///< trace::now() of this process
  std::int64_t durationNs = 0;
  std::uint64_t id = 0;      ///< 's', 'f', 'A': what both ends share
  std::uint32_t thread = 0;  ///< a small number per thread of this process
  std::string detail;        ///< shown as the event's args.detail
};

struct Recorded {
  std::vector<Event> events;
  std::vector<std::pair<std::uint32_t, std::string>> threads;  ///< number, name
  std::uint64_t dropped = 0;  ///< past the bound (enable's maxEvents)
};

namespace detail {
extern std::atomic<bool> g_on;
}

/// Whether this process records (enable() was called).
inline bool on() { return detail::g_on.load(std::memory_order_relaxed); }

/// Starts recording, keeping at most `maxEvents` (later ones are counted as dropped).
void enable(std::size_t maxEvents);
/// Stops recording (what was recorded stays until take()).
void disable();

/// The trace clock: steady_clock, in nanoseconds.
std::int64_t now();

/// Records `event` on this thread's buffer (its `thread` is set here).
void record(Event event);
void instant(const char* category, std::string name, std::string detail = {});
/// The start of flow `id`, inside the span running on this thread.
void flowStart(const char* category, std::uint64_t id);
/// The end of flow `id`, bound to the span running on this thread.
void flowEnd(const char* category, std::uint64_t id);
/// An id for a flow from what names it on both ends (a cast's origin, its id, a rank).
std::uint64_t flowId(std::uint64_t a, std::uint64_t b, std::uint64_t c);

/// What every thread recorded so far, taken out (the buffers are emptied).
Recorded take();

/// A span on this thread, recorded when it ends; inactive until begin().
class Span {
 public:
  Span() = default;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() {
    if (active_) end();
  }
  void begin(const char* category, std::string name, std::string detail = {});
  /// Records the span (once; nothing when it never began).
  void end();
  /// Renames the innermost span begun and not yet ended on this thread, if
  /// any: the mailbox opens a handler's span before a Python endpoint's
  /// name is known (it is inside the pickled call).
  static void renameInnermost(std::string name);

 private:
  bool active_ = false;
  Span* outer_ = nullptr;  ///< the span open on this thread when this one began
  Event event_;
};

}  // namespace crown::trace
