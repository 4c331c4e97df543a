#include "crown/common/env.h"

#include <cstdlib>

#include "crown/common/error.h"

namespace crown::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::int64_t integer(const char* name, std::int64_t fallback, std::int64_t min, std::int64_t max) {
  auto text = get(name);
  if (!text) return fallback;
  std::size_t used = 0;
  std::int64_t value = 0;
  try {
    value = std::stoll(*text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text->size() || value < min || value > max) {
    throw ConfigError(std::string(name) + "='" + *text + "' is not an integer in [" +
                      std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

std::string choice(const char* name, const char* fallback,
                   std::initializer_list<const char*> allowed) {
  auto text = get(name);
  if (!text) return fallback;
  std::string accepted;
  for (const char* value : allowed) {
    if (*text == value) return *text;
    accepted += accepted.empty() ? value : std::string("|") + value;
  }
  throw ConfigError(std::string(name) + "='" + *text + "' is not one of " + accepted);
}

std::chrono::milliseconds millis(const char* name, std::chrono::milliseconds fallback,
                                 std::chrono::milliseconds min, std::chrono::milliseconds max) {
  return std::chrono::milliseconds(integer(name, fallback.count(), min.count(), max.count()));
}

}  // namespace crown::env
