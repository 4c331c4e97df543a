// crown's logger: one spdlog logger named "crown", level from CROWN_LOG_LEVEL
// (trace, debug, info, warn, error, off; default warn), every line tagged with
// the rank once bootstrap knows it. spdlog loggers are thread-safe.
#pragma once

#include <spdlog/spdlog.h>

namespace crown::log {

/// The process-wide logger.
spdlog::logger& get();

/// Tags every later line with this rank ("[crown r3 warn] ...").
void setRank(unsigned rank);

}  // namespace crown::log
