// CROWN_* settings read from the environment. Every reader validates and
// throws crown::ConfigError naming the variable and the accepted range.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace crown::env {

/// The variable's value, or nullopt when unset or empty.
std::optional<std::string> get(const char* name);

/// An integer setting in [min, max]; `fallback` when unset.
std::int64_t integer(const char* name, std::int64_t fallback, std::int64_t min, std::int64_t max);

/// One of `allowed` (case-sensitive); `fallback` when unset.
std::string choice(const char* name, const char* fallback, std::initializer_list<const char*> allowed);

/// A duration in milliseconds in [min, max]; `fallback` when unset.
std::chrono::milliseconds millis(const char* name, std::chrono::milliseconds fallback,
                                 std::chrono::milliseconds min = std::chrono::milliseconds(1),
                                 std::chrono::milliseconds max = std::chrono::hours(24 * 365));

}  // namespace crown::env
