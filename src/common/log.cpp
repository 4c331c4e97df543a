#include "crown/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "crown/common/env.h"
#include "crown/common/error.h"

namespace crown::log {
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
