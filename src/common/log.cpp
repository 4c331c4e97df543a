#include "crown/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <utility>

#include "crown/common/env.h"
#include "crown/common/error.h"

namespace crown::log {

std::optional<std::size_t> RateLimit::admit() {
  std::lock_guard lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  if (!first_ && now - last_ < period_) {
    ++dropped_;
    return std::nullopt;
  }
  first_ = false;
  last_ = now;
  return std::exchange(dropped_, 0);
}
namespace {

std::shared_ptr<spdlog::logger> makeLogger() {
  // stderr: stdout belongs to the user's program.
  auto logger = spdlog::stderr_color_mt("crown");
  auto level = spdlog::level::from_str(env::get("CROWN_LOG_LEVEL").value_or("warn"));
  logger->set_level(level);
  logger->set_pattern("[crown %l] %v");
  return logger;
}

}  // namespace

spdlog::logger& get() {
  static std::shared_ptr<spdlog::logger> logger = makeLogger();
  return *logger;
}

void setRank(unsigned rank) { get().set_pattern("[crown r" + std::to_string(rank) + " %l] %v"); }

}  // namespace crown::log
