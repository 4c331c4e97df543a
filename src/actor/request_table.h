// RequestTable: the requests of one Proc that wait for their replies, and
// the peers known to be lost. DLV-1 is kept here: a request ends with its
// reply, or fails when its peer is lost (markLost), when it is cancelled
// (a caller's timeout), or at shutdown (takeAll). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "crown/actor/proc.h"

namespace crown::detail {

class RequestTable {
 public:
  /// `slots` ranks, of which [0, present) and `self` are present from the
  /// start; the others are vacant until they join (admit).
  RequestTable(Rank slots, Rank present, Rank self);

  std::uint64_t nextId() { return nextId_.fetch_add(1); }
  /// Registers request `id` to `dest`; false (nothing registered) when
  /// `dest` is already known to be lost or has not joined: the caller fails it.
  bool add(std::uint64_t id, Rank dest, Completion complete);
  /// Ends request `id` with the reply or failure frame that answered it; a
  /// reply to a request no longer waiting (cancelled) is dropped.
  void answer(wire::Envelope&& envelope, wire::Bytes&& payload);
  /// Ends request `id` with `error`, if it still waits.
  void fail(std::uint64_t id, const std::exception_ptr& error);
  /// Forgets request `id`: its late reply is dropped.
  void cancel(std::uint64_t id);

  /// Present: joined and not lost.
  bool alive(Rank rank) const;
  /// Requests waiting for their answer.
  std::size_t pending() const;
  /// Joined once (alive or lost since), as opposed to a vacant slot.
  bool exists(Rank rank) const;
  /// A vacant slot's rank joined (a replacement); false when it was not vacant.
  bool admit(Rank rank);
  /// Marks `peer` lost and hands back the completions of its requests.
  std::vector<Completion> markLost(Rank peer);
  /// Hands back every waiting request's completion (shutdown).
  std::vector<Completion> takeAll();

 private:
  struct Pending {
    Rank dest = 0;
    Completion complete;
  };
  Completion take(std::uint64_t id);

  enum class State : std::uint8_t { kPresent, kLost, kVacant };

  // Guards pending_ and state_ together, so a request is either registered
  // before its peer is marked lost (and failed by markLost) or sees the mark.
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::vector<State> state_;  // by rank
  std::atomic<std::uint64_t> nextId_{1};
};

}  // namespace crown::detail
