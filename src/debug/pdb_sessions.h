// The two ends of remote pdb (crown/debug/pdb.h), kept by the debug module:
// the controller's registry of stopped sessions, and each rank's inbox of
// the lines typed for its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "crown/debug/pdb.h"

namespace crown::debug::detail {

class PdbRegistry {
 public:
  using Alive = std::function<bool(Rank)>;
  /// True when the session was not stopped before (a new one, or one that
  /// continued and stopped again).
  bool take(PdbPrompt&& prompt);
  std::vector<PdbSession> list(const Alive& alive);
  PdbRead read(Rank rank, std::uint64_t session, std::chrono::milliseconds wait,
               const Alive& alive);
  /// The session leaves its prompt; throws crown::Error unless it was at one.
  void leavePrompt(Rank rank, std::uint64_t session);

 private:
  struct Entry {
    PdbSession where;
    std::string output;  // unread
    bool ended = false;
  };
  using Key = std::pair<Rank, std::uint64_t>;
  Entry& find(const Key& key);  // under mutex_

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<Key, Entry> sessions_;
};

class PdbInbox {
 public:
  void put(PdbInput&& input);
  /// The next line for `session`; empty once stop() ran or `giveUp` says so
  /// (asked a few times a second).
  std::optional<std::string> take(std::uint64_t session, const std::function<bool()>& giveUp);
  void stop();

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::uint64_t, std::deque<std::string>> lines_;
  bool stopped_ = false;
};

}  // namespace crown::debug::detail
