// crown's logger: one spdlog logger named "crown", level from CROWN_LOG_LEVEL
// (trace, debug, info, warn, error, off; default warn), every line tagged with
// the rank once bootstrap knows it. spdlog loggers are thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>

namespace crown::log {

/// The process-wide logger.
spdlog::logger& get();

/// Tags every later line with this rank ("[crown r3 warn] ...").
void setRank(unsigned rank);

/// One per kind of line that can repeat without bound (a failing accept, a
/// flood of rejected connections): at most one line per period.
///   if (auto dropped = limit.admit()) log::get().warn("... ({} like it dropped)", *dropped);
class RateLimit {
 public:
  explicit RateLimit(std::chrono::milliseconds period = std::chrono::seconds(1)) : period_(period) {}
  /// How many lines were dropped since the last admitted one, or nullopt
  /// when this one should be dropped too. Thread-safe.
  std::optional<std::size_t> admit();

 private:
  std::mutex mutex_;
  std::chrono::milliseconds period_;
  std::chrono::steady_clock::time_point last_{};
  std::size_t dropped_ = 0;
  bool first_ = true;
};

}  // namespace crown::log
