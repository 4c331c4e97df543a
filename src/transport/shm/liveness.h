// How the shared-memory backend (shm_backend.cpp) tells its peers alive,
// as the Asio links do: heartbeat ticks, the peers silent too long, whether
// the silence was this process's own, and what a lost link's reason says.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "crown/transport/transport.h"

namespace crown::transport::shm {

/// One link at a heartbeat tick: its socket and when its peer was last heard.
struct Beat {
  Rank peer = 0;
  int socket = -1;
  std::atomic<std::int64_t>* heard = nullptr;  // steady_clock ticks
};

/// A tick: a heartbeat byte on every link's socket, then the peers heard
/// from on none of their links within `bound`, each with its silence. When
/// `suspended`, what was heard counts as heard now (the silence was ours).
std::vector<std::pair<Rank, std::chrono::milliseconds>> beat(const std::vector<Beat>& links,
                                                             bool suspended,
                                                             std::chrono::milliseconds bound);

/// What a lost peer's reason adds: its last words, else, when its link
/// closed (not fell silent) while this process was not suspended, that it
/// left none; then `suspended` (SuspensionClock::note).
LinkError lossReason(LinkError error, const std::string& lastWords, const std::string& suspended);

// Whether this process was just suspended (SIGSTOP, a debugger) or starved,
// told by the heartbeat ticks as the Asio links tell it by their timers: a
// tick that comes an interval late, or one overdue now. The silence was then
// this process's own, so its peers are not blamed, and a link lost
// meanwhile says why. Any thread.

class SuspensionClock {
 public:
  using Clock = std::chrono::steady_clock;

  SuspensionClock(std::chrono::milliseconds interval, int misses)
      : interval_(interval), misses_(misses) {}

  void started() { lastTick_ = Clock::now().time_since_epoch().count(); }

  /// A tick due at `due` runs now: true when it is late enough that this
  /// process was suspended.
  bool ticked(Clock::time_point due) {
    auto now = Clock::now();
    lastTick_ = now.time_since_epoch().count();
    if (now - due <= interval_) return false;
    suspendedMs_ = std::chrono::duration_cast<std::chrono::milliseconds>(now - due).count();
    ended_ = now.time_since_epoch().count();
    return true;
  }

  /// What a lost link adds to its reason: "" unless this process is, or just
  /// was, suspended (the peer has then likely given this rank up).
  std::string note() const {
    if (interval_.count() == 0) return "";
    auto now = Clock::now().time_since_epoch().count();
    auto overdue = Clock::duration(now - lastTick_.load()) - interval_;
    auto ms = [](Clock::duration d) {
      return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
    };
    const char* tail = " ms: the peer has likely given this rank up)";
    if (overdue > interval_)
      return " (this process was just suspended for about " + ms(overdue) + tail;
    if (ended_ != 0 && Clock::duration(now - ended_.load()) < interval_ * misses_ * 2) {
      return " (this process was just suspended for " + std::to_string(suspendedMs_.load()) + tail;
    }
    return "";
  }

 private:
  const std::chrono::milliseconds interval_;
  const int misses_;
  std::atomic<std::int64_t> lastTick_{0};  // clock ticks
  std::atomic<std::int64_t> ended_{0};     // of the last late tick
  std::atomic<std::int64_t> suspendedMs_{0};
};

}  // namespace crown::transport::shm
