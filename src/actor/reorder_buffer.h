// ReorderBuffer: restores send order (ORD-1) at one destination actor.
// Every ordered message carries its position seq (1, 2, ...) among those
// from its sender to this actor. A cast travels through other processes
// while a direct send goes straight, so a later message may arrive first:
// it is held until the ones before it have arrived.
//
// A message can go missing for good only when a cast hop died before
// forwarding it; then the caller of that cast was told (DLV-1). The owner
// arms a timer while something is held and calls giveUp() when it fires, so
// nothing waits forever behind a gap, and no message waits longer than the
// timeout from its own arrival: when many gaps open at once (a hop died
// under a stream of casts), they close together instead of one timeout
// after another. Not thread-safe: the owner's mutex (the actor's mailbox
// mutex) guards it.
//
// A cast hop's parent resends the broadcasts it had sent to a hop that died
// (mesh/resend_window.h), so a member may receive one twice: once through
// the hop before it died, once resent. ORD-1 says once, so a number already
// delivered or already held is a duplicate, dropped; a number whose gap was
// given up is late, as before. Telling the two apart needs the given-up
// ranges, of which the last kGivenUpRanges per sender are kept (bounded
// memory); a number below them reads as a duplicate, and its loss was
// reported when its gap was given up.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "crown/wire/envelope.h"

namespace crown::detail {

template <class Item>
class ReorderBuffer {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Verdict {
    kInOrder,    ///< appended to out, with any held messages it unblocked
    kHeldFirst,  ///< held, and no gap timer runs for this sender: arm one
    kHeld,       ///< held behind a gap whose timer is already armed
    kLate,       ///< its place has passed (a gap given up): item left as it was
    kDuplicate,  ///< delivered or held already: item left as it was
  };

  /// Given-up ranges remembered per sender, to tell kLate from kDuplicate.
  static constexpr std::size_t kGivenUpRanges = 32;

  Verdict accept(const wire::ActorId& sender, std::uint64_t seq, Item& item,
                 std::deque<Item>& out, Clock::time_point now = Clock::now()) {
    Sender& state = senders_[sender];
    if (seq < state.expected) return state.gaveUp(seq) ? Verdict::kLate : Verdict::kDuplicate;
    if (seq > state.expected) {
      if (state.held.contains(seq)) return Verdict::kDuplicate;
      state.held.emplace(seq, Held{std::move(item), now});
      if (state.timerArmed) return Verdict::kHeld;
      state.timerArmed = true;
      return Verdict::kHeldFirst;
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

  struct GiveUp {
    std::uint64_t skipped = 0;  ///< sequence numbers given up for lost
    std::uint64_t first = 0;    ///< the first and last of them, when skipped > 0
    std::uint64_t last = 0;
    std::optional<Clock::time_point> next;  ///< when to call again, if messages stay held
  };

  /// The gap timer fired: every held message that has waited `timeout` is
  /// appended to out, skipping the gaps before it, with what that releases.
  GiveUp giveUp(const wire::ActorId& sender, Clock::time_point now, Clock::duration timeout,
                std::deque<Item>& out) {
    GiveUp result;
    auto it = senders_.find(sender);
    if (it == senders_.end()) return result;
    Sender& state = it->second;
    std::optional<std::uint64_t> last;  // the last held message that waited long enough
    for (const auto& [seq, held] : state.held) {
      if (now - held.since >= timeout) last = seq;
    }
    if (last) {
      for (auto held = state.held.begin(); held != state.held.end() && held->first <= *last;
           held = state.held.erase(held)) {
        if (held->first > state.expected) {
          if (result.skipped == 0) result.first = state.expected;
          result.last = held->first - 1;
          result.skipped += held->first - state.expected;
          state.rememberGivenUp(state.expected, held->first - 1);
        }
        out.push_back(std::move(held->second.item));
        state.expected = held->first + 1;
      }
      release(state, out);
    }
    for (const auto& [seq, held] : state.held) {
      if (!result.next || held.since + timeout < *result.next) result.next = held.since + timeout;
    }
    state.timerArmed = result.next.has_value();
    return result;
  }

  /// The actor is gone: every held message is appended to out (to be
  /// refused), and the buffer forgets every sender.
  void takeAll(std::deque<Item>& out) {
    for (auto& [sender, state] : senders_)
      for (auto& [seq, held] : state.held) out.push_back(std::move(held.item));
    senders_.clear();
  }

 private:
  struct Held {
    Item item;
    Clock::time_point since;
  };
  struct Sender {
    std::uint64_t expected = 1;
    std::map<std::uint64_t, Held> held;
    bool timerArmed = false;
    std::deque<std::pair<std::uint64_t, std::uint64_t>> givenUp;  // [first, last], oldest first

    bool gaveUp(std::uint64_t seq) const {
      for (const auto& [first, last] : givenUp)
        if (seq >= first && seq <= last) return true;
      return false;
    }
    void rememberGivenUp(std::uint64_t first, std::uint64_t last) {
      givenUp.emplace_back(first, last);
      if (givenUp.size() > kGivenUpRanges) givenUp.pop_front();
    }
  };

  static void release(Sender& state, std::deque<Item>& out) {
    for (auto it = state.held.begin(); it != state.held.end() && it->first == state.expected;
         it = state.held.erase(it)) {
      out.push_back(std::move(it->second.item));
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
