// FlowControl: backpressure between each sender actor and each destination
// actor (FLO-1: a sender never grows a receiver's memory past its mailbox
// limit; it waits instead).
//
// Every numbered message (ORD-1's seq, direct or through a cast) counts
// against its (sender, destination) window: at most CROWN_MAILBOX_LIMIT
// bytes and CROWN_MAILBOX_LIMIT_MESSAGES messages sent and not yet handled.
// A sender whose window is full waits before its message is numbered (the
// pool is told, as for a blocking Future::get, so no reply goes unread).
// The receiver counts what its actor has handled (or refused) and, each
// time a quarter of a window has been handled, sends the sender a Credit:
// "handled up to seq h", which frees every message up to h at once. A
// waiting sender also asks (CreditRequest), and is then credited at once
// and after the next message handled, so a message that needs more room
// than the quarters have freed never waits for a credit that is not due.
// A seq given up as lost (an ORD-1 gap) is passed over by the next handled
// one, so it frees itself. A sender far from its limits never waits, and
// its traffic costs one small Credit per quarter window.
//
// Not counted: replies, raw agents' messages (cast hops, credits). Not
// waited for: a message an actor sends to itself from its own handler (its
// mailbox cannot drain until the handler returns). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crown/wire/envelope.h"
#include "crown/wire/serialize.h"

namespace crown::detail {

/// From a destination's rank to a sender's: its actor has handled the
/// sender's messages up to `handledThrough`, `bytes` of them since the last
/// Credit.
struct Credit {
  wire::ActorId sender;
  wire::ActorId dest;
  std::uint64_t handledThrough = 0;
  std::uint64_t bytes = 0;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sender& dest& handledThrough& bytes;
  }
};

/// From a waiting sender's rank to the destination's: credit me now.
struct CreditRequest {
  wire::ActorId sender;
  wire::ActorId dest;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sender& dest;
  }
};

struct FlowLimits {
  std::size_t messages = 10000;
  std::size_t bytes = std::size_t{64} << 20;
  /// CROWN_MAILBOX_LIMIT (bytes) and CROWN_MAILBOX_LIMIT_MESSAGES.
  static FlowLimits fromEnv();
};

class FlowControl {
 public:
  using SendCredit = std::function<void(const Credit&)>;        // to credit.sender's rank
  using AskCredit = std::function<void(const CreditRequest&)>;  // to request.dest's rank
  /// `alive` tells whether a rank still lives: a sender never waits on a lost one.
  FlowControl(FlowLimits limits, SendCredit sendCredit, AskCredit askCredit,
              std::function<bool(Rank)> alive);

  // --- the sender's side ---
  /// Waits while the window from `sender` to `dest` cannot take `bytes` more.
  /// A window with nothing in flight takes any message, however large.
  void waitForRoom(const wire::ActorId& sender, const wire::ActorId& dest, std::size_t bytes);
  /// Message `seq` of `bytes` went from `sender` to `dest` (after waitForRoom).
  void sent(const wire::ActorId& sender, const wire::ActorId& dest, std::uint64_t seq,
            std::size_t bytes);
  /// A Credit arrived (any thread, typically the one that read it).
  void credited(const Credit& credit);

  // --- the receiver's side ---
  /// Actor `dest` here handled (or refused) message `seq` of `bytes` from `sender`.
  void handled(const wire::ActorId& sender, const wire::ActorId& dest, std::uint64_t seq,
               std::size_t bytes);
  /// A waiting sender asks: credited now if anything new was handled, and
  /// in any case after the next message handled.
  void requested(const CreditRequest& request);

  // --- both ---
  /// Rank `rank` is lost: windows towards it are dropped (their waiters go
  /// on, and their sends fail as usual), and its senders are forgotten.
  void peerLost(Rank rank);
  /// Actor `id` of this proc stopped: as a sender and as a destination.
  void forgetActor(const wire::ActorId& id);
  /// Actor `destLocal` stopped on `ranks` (all, when null): a stopped mesh
  /// or slice. Its windows go.
  void forgetDestination(std::uint64_t destLocal, const std::vector<std::size_t>* ranks = nullptr);
  /// Destination `dest` (a closed port) takes nothing more: what it handled
  /// and has not credited is credited now, and its counts go.
  void release(const wire::ActorId& dest);
  /// Windows and counts held (tests of pruning).
  std::size_t entries();

 private:
  struct PairKey {
    wire::ActorId sender;
    wire::ActorId dest;
    friend bool operator==(const PairKey&, const PairKey&) = default;
  };
  struct PairHash {
    std::size_t operator()(const PairKey& key) const;
  };
  // The sender's view of one pair. Seqs of a pair are consecutive, so the
  // messages in flight are a difference; their bytes shrink by each
  // Credit's. Dropped once nothing is in flight (bytes of a message lost
  // with a hop, never credited, go with it).
  struct Window {
    std::uint64_t lastSent = 0;
    std::uint64_t handledThrough = 0;
    std::size_t bytes = 0;
    std::uint64_t inFlight() const { return lastSent > handledThrough ? lastSent - handledThrough : 0; }
  };
  struct Handled {  // the receiver's view of one pair
    std::uint64_t through = 0;
    std::uint64_t credited = 0;
    std::size_t bytesSinceCredit = 0;
    bool owed = false;  // the sender waits: credit after the next one handled
  };

  bool full(const Window& window, std::size_t bytes) const;
  static Credit take(Handled& counts, const wire::ActorId& sender, const wire::ActorId& dest);

  FlowLimits limits_;
  std::size_t creditMessages_;  // a Credit goes after this many handled
  std::size_t creditBytes_;     // or this many bytes
  SendCredit sendCredit_;
  AskCredit askCredit_;
  std::function<bool(Rank)> alive_;
  std::mutex mutex_;
  std::condition_variable roomFreed_;
  int waiters_ = 0;
  std::unordered_map<PairKey, Window, PairHash> windows_;
  std::unordered_map<PairKey, Handled, PairHash> handled_;
};

}  // namespace crown::detail

CROWN_MESSAGE(crown::detail::Credit, "crown::Credit");
CROWN_MESSAGE(crown::detail::CreditRequest, "crown::CreditRequest");
