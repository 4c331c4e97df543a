// ReorderBuffer: restores send order (ORD-1) at one destination actor.
// Every ordered message carries its position seq (1, 2, ...) among those
// from its sender to this actor. A cast travels through other processes
// while a direct send goes straight, so a later message may arrive first:
// it is held until the ones before it have arrived.
//
// A message can go missing for good only when a cast hop died before
// forwarding it; then the caller of that cast was told (DLV-1). The owner
// arms a timer while something is held and calls giveUp() when it fires, so
// nothing waits forever behind a gap. Not thread-safe: the owner's mutex
// (the actor's mailbox mutex) guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>

#include "crown/wire/envelope.h"

namespace crown::detail {

template <class Item>
class ReorderBuffer {
 public:
  enum class Verdict {
    kInOrder,    ///< appended to out, with any held messages it unblocked
    kHeldFirst,  ///< held; nothing else from this sender was: arm a timer
    kHeld,       ///< held behind a gap whose timer is already armed
    kLate,       ///< its place has passed (a gap given up): item left as it was
  };

  Verdict accept(const wire::ActorId& sender, std::uint64_t seq, Item& item,
                 std::deque<Item>& out) {
    Sender& state = senders_[sender];
    if (seq < state.expected) return Verdict::kLate;
    if (seq > state.expected) {
      bool first = state.held.empty();
      state.held.emplace(seq, std::move(item));
      return first ? Verdict::kHeldFirst : Verdict::kHeld;
    }
    out.push_back(std::move(item));
    ++state.expected;
    release(state, out);
    return Verdict::kInOrder;
  }

  /// The seq that sender's next message must have.
  std::uint64_t expected(const wire::ActorId& sender) const {
    auto it = senders_.find(sender);
    return it == senders_.end() ? 1 : it->second.expected;
  }

  /// The gap timer fired. If sender is still stuck at `stuckAt`, skips to its
  /// first held message and appends what that releases; returns true while
  /// messages stay held (behind a later gap: arm the timer again).
  bool giveUp(const wire::ActorId& sender, std::uint64_t stuckAt, std::deque<Item>& out) {
    auto it = senders_.find(sender);
    if (it == senders_.end() || it->second.held.empty()) return false;
    Sender& state = it->second;
    if (state.expected == stuckAt) {
      state.expected = state.held.begin()->first;
      release(state, out);
    }
    return !state.held.empty();
  }

 private:
  struct Sender {
    std::uint64_t expected = 1;
    std::map<std::uint64_t, Item> held;
  };

  static void release(Sender& state, std::deque<Item>& out) {
    for (auto it = state.held.begin(); it != state.held.end() && it->first == state.expected;
         it = state.held.erase(it)) {
      out.push_back(std::move(it->second));
      ++state.expected;
    }
  }

  struct Hash {
    std::size_t operator()(const wire::ActorId& id) const {
      return std::hash<std::uint64_t>()(id.local * 0x9E3779B97F4A7C15ull ^ id.rank);
    }
  };
  std::unordered_map<wire::ActorId, Sender, Hash> senders_;
};

}  // namespace crown::detail
