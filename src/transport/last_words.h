// How every backend names a lost peer's last words (bootstrap/departure.h:
// a dying rank sends them in a departing notice), so that a loss reads the
// same whichever link carried the peer.
#pragma once

#include <cstddef>
#include <string>

namespace crown::transport {

/// The most of a peer's words kept for its loss report.
inline constexpr std::size_t kMaxLastWords = 512;

/// "; its last words: WORDS", or, with none and `sayIfNone` (the link broke
/// rather than fell silent, which says nothing of how), that it left none:
/// SIGKILL (the OOM killer) and _exit run no code.
inline std::string lastWordsNote(const std::string& words, bool sayIfNone) {
  if (!words.empty()) return "; its last words: " + words;
  if (!sayIfNone) return "";
  return " (it left no last words: killed by SIGKILL, the OOM killer?, or it called _exit)";
}

}  // namespace crown::transport
