// PortHub: the ports of one Proc (crown/actor/port.h), both ends.
//   Owner side: PortState, the shared state of a PortReceiver and of its
//   entry in the RequestTable (DLV-1: the table fails it with its owner, at
//   shutdown, and tells it of a watched rank lost).
//   Holder side: PortHold, the one hold per (port, proc) that every
//   PortHandle copy shares; the hub keeps them by port and by holding actor,
//   so that a hold dropped without a send, or one whose actor goes, tells
//   its port at once.
// The hub outlives its Proc only detached (every call then does nothing),
// since receivers and handles may outlive it. Thread-safe; lock order:
// RequestTable, then a PortState (a PortState never calls out holding its own).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "crown/actor/port.h"
#include "crown/common/error.h"

namespace crown::detail {

class RequestTable;
class FlowControl;
class Router;

/// Set in the local ids that name ports and sending handles to flow control
/// (FLO-1): never an actor's (kMeshLocalBit is bit 63, plain ids are small).
constexpr std::uint64_t kPortFlowBit = std::uint64_t{1} << 62;

class PortHub;

struct QueuedItem {
  PortItem item;
  wire::ActorId flowSender;  // FLO-1: the sending handle (seq 0: not counted)
  std::uint64_t seq = 0;
  std::size_t bytes = 0;
};

class PortState {
 public:
  PortState(PortRef ref, std::vector<Rank> watched, std::shared_ptr<PortHub> hub);
  const PortRef& ref() const { return ref_; }
  /// A watched rank, or a holder's announced (kPortWatch).
  bool watches(Rank rank);
  /// A holder on `rank` announced itself (watch) or let go (kPortWatch):
  /// the RequestTable calls it under its lock, so a loss marked later finds it.
  void watchHolder(Rank rank, bool watch);

  /// A port frame arrived (kPortValue, kPortError, kPortDrop).
  void deliver(wire::Envelope&& envelope, wire::Bytes&& payload);
  /// Watched rank `rank`, or a holder's, was lost: an error item from it, once.
  void lost(Rank rank, const std::exception_ptr& error);
  /// A holder announced itself from a rank already lost.
  void holderAbsent(Rank rank);
  /// The owner went, or the proc shuts down: next() throws `error`.
  void fail(const std::exception_ptr& error);
  /// The receiver closes it: later items are dropped, those queued stay.
  void close();
  /// The one wait of a port (an abortable wait plugs in here):
  /// nullopt when ended and drained; throws the failure, or Timeout at `deadline`.
  std::optional<PortItem> next(std::optional<std::chrono::steady_clock::time_point> deadline);
  std::size_t queued();

 private:
  void push(QueuedItem&& item);
  // Under mutex_: the item's member settles; false when it had settled.
  bool settle(Rank from);

  PortRef ref_;
  std::shared_ptr<PortHub> hub_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<QueuedItem> queue_;
  std::vector<Rank> watched_;  // the members (kPerMember): fixed at open
  std::vector<bool> settled_;  // by watched_: answered (kPerMember) or reported lost
  std::vector<Rank> holders_;  // ranks whose holders announced themselves, while they hold
  std::size_t unsettled_ = 0;
  bool complete_ = false;  // kOnce / kPerMember: every item it takes has come
  bool closed_ = false;    // closed by the receiver, or failed
  std::exception_ptr failure_;
  std::atomic<bool> ready_{false};  // something for next() now (spinning waiters)
};

class PortHold {
 public:
  PortHold(PortRef ref, bool announced, std::uint64_t holder, std::uint64_t flowKey,
           std::shared_ptr<PortHub> hub)
      : ref_(ref), announced_(announced), holder_(holder), flowKey_(flowKey), hub_(std::move(hub)) {}
  ~PortHold();
  const PortRef& ref() const { return ref_; }
  /// It told the owner to watch this rank (kPortWatch), and untells it as it goes.
  bool announced() const { return announced_; }
  std::uint64_t holder() const { return holder_; }
  std::uint64_t flowKey() const { return flowKey_; }
  std::uint64_t nextSeq() { return ++seq_; }
  void send(wire::MessageKind kind, std::string type, wire::Payload payload);
  void sendError(const std::exception_ptr& error);
  /// The holding actor stopped or died of `cause`: the port hears, once
  /// (a kOnce/kPerMember port only when this hold has not sent).
  void holderGone(const std::exception_ptr& cause);

 private:
  PortRef ref_;
  bool announced_;
  std::uint64_t holder_;
  std::uint64_t flowKey_;
  std::shared_ptr<PortHub> hub_;
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<bool> answered_{false};  // sent, or dropped: no drop notice due
};

class PortHub : public std::enable_shared_from_this<PortHub> {
 public:
  PortHub(Rank rank, RequestTable& table, FlowControl& flow, Router& router,
          std::function<wire::ActorId()> senderId,
          std::function<std::exception_ptr(Rank)> absentError);
  /// The Proc is going: every later call does nothing.
  void detach() { attached_.store(false); }
  bool attached() const { return attached_.load(); }
  Rank rank() const { return rank_; }
  /// The error of a rank lost or never present, as a watched rank's.
  std::exception_ptr absentError(Rank rank) const { return absentError_(rank); }

  // --- owner side ---
  PortReceiver open(PortMode mode, std::vector<Rank> watched);
  /// A port frame to a port that is no longer open: its FLO-1 credit.
  void orphan(const wire::Envelope& envelope, std::size_t bytes);
  /// An item of a stream port was taken (or dropped): its credit.
  void consumed(std::uint64_t id, const QueuedItem& item);
  /// A port ended: its table entry goes (and its flow windows, `flows`).
  void ended(std::uint64_t id, bool flows);
  void ownerGone(std::uint64_t local, const std::exception_ptr& error);
  void peerLost(Rank peer, const std::exception_ptr& error);
  void shutdown(const std::exception_ptr& error);

  // --- holder side ---
  PortHandle hold(const PortRef& ref);
  /// kPortWatch to the owner: this rank holds the port (watch) or no longer does.
  void sendWatch(PortHold& hold, bool watch);
  void send(PortHold& hold, wire::MessageKind kind, std::string type, wire::Payload payload);
  void released(PortHold& hold, bool dropNotice);
  /// The holds of actor `local`, taken before it is destroyed (its handles go with it).
  std::vector<std::shared_ptr<PortHold>> holdsOf(std::uint64_t local);
  /// Their actor stopped or died of `cause`: each port hears.
  void holderGone(const std::vector<std::shared_ptr<PortHold>>& holds,
                  const std::exception_ptr& cause);

 private:
  struct Key {
    wire::ActorId owner;
    std::uint64_t id;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const;
  };
  struct Slot {
    std::weak_ptr<PortHold> hold;
    std::uint64_t holder = 0;
  };

  Rank rank_;
  RequestTable& table_;
  FlowControl& flow_;
  Router& router_;
  std::function<wire::ActorId()> senderId_;
  std::function<std::exception_ptr(Rank)> absentError_;
  std::atomic<bool> attached_{true};
  std::atomic<std::uint64_t> nextFlowKey_{1};
  std::mutex holdsMutex_;
  std::unordered_map<Key, Slot, KeyHash> holds_;
};

/// The error a holder's drop notice carries.
std::exception_ptr droppedError(Rank rank, const PortRef& ref);

}  // namespace crown::detail
