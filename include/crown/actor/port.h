// Ports: reply destinations as kernel objects (design.md, "Replies and
// supervision"). A port is an entry of its owner proc's request table, as a
// request is, so it ends as a request does (DLV-1, with no probing): it
// fails when its owner (the actor that opened it) stops or dies, at
// shutdown, and it hears at once, as an error item, when a rank it waits on
// (a watched rank) is lost, or when a holder drops it without sending (its
// last handle on that proc destroyed) or dies holding it.
//
// A holder's rank is watched too, while it holds the port, wherever the
// port went: a port opened with no watched ranks, and any port forwarded
// on by a holder (PortRef::announce), makes each new holder on another
// rank announce itself to the owner first (a kPortWatch frame, ahead of its
// values on the same link), and let go again when its hold goes. So a port
// passed from actor to actor hears of the loss of the rank that holds it
// now, as it hears of a watched rank's. A port opened with watched ranks
// (a call's members) costs its direct holders no frame.
//
// Three sides, each thread-safe:
//   PortRef       the picklable address: owner actor, port id, mode.
//   PortReceiver  the owner's end (Proc::openPort): next() waits for an item.
//   PortHandle    a holder's end (Proc::holdPort), one per port per proc,
//                 shared by every copy: send(), sendError().
//
// ORD-1 for ports: values sent to one port from one sender arrive in send
// order. Port frames always travel direct, never through a cast tree: to
// another rank over that peer's one FIFO link (read on its one strand), to
// this rank by synchronous delivery on the sending thread; so no seq is
// needed to restore their order (a port frame's seq serves FLO-1 alone).
//
// FLO-1 for stream ports: a stream port's queue is the receiver's memory,
// so its values count against a flow-control window (flow_control.h) from
// each sending handle to the port, credited as next() consumes them, with
// the mailbox limits (CROWN_MAILBOX_LIMIT, CROWN_MAILBOX_LIMIT_MESSAGES). A
// sender whose window is full waits, except the port's owner itself (it
// would wait on its own next()). One-shot and per-member ports hold at most
// one value per member by construction (later ones are dropped on arrival),
// so they are not counted.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crown/wire/envelope.h"
#include "crown/wire/payload.h"
#include "crown/wire/serialize.h"

namespace crown {

using wire::ActorId;

enum class PortMode : std::uint8_t {
  kOnce = 0,       ///< one item, then the port completes (a request's reply)
  kPerMember = 1,  ///< one item per member (watched) rank; completes when each has one
  kStream = 2,     ///< any number of items, until its receiver closes it
};

/// The address of a port: picklable, travels inside messages.
struct PortRef {
  ActorId owner;             ///< the actor that opened it ({rank, 0}: no actor)
  std::uint64_t id = 0;      ///< its entry in the owner proc's request table
  PortMode mode = PortMode::kStream;
  /// A holder on another rank than the owner's announces itself (above):
  /// set by the owner when it watches no rank, and on every ref a holder
  /// hands on (PortHandle::ref()).
  bool announce = false;

  friend bool operator==(const PortRef&, const PortRef&) = default;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& owner& id& mode& announce;
  }
};

/// What a port receives: a value, or an error in its place.
struct PortItem {
  Rank from = 0;             ///< the sending rank (the member, for kPerMember)
  std::exception_ptr error;  ///< set: an error item (sendError, a drop, a lost rank)
  bool dropped = false;      ///< the error says the holder dropped the port or died
  std::string type;          ///< the value's type name (empty for an error)
  wire::Bytes payload;
};

namespace detail {
class PortState;  // src/actor/port_hub.h
class PortHold;
}  // namespace detail

/// The owner's end of a port. Destroying it closes the port.
class PortReceiver {
 public:
  PortReceiver() = default;
  explicit PortReceiver(std::shared_ptr<detail::PortState> state);
  PortReceiver(PortReceiver&&) noexcept = default;
  PortReceiver& operator=(PortReceiver&& other) noexcept;
  ~PortReceiver();

  const PortRef& ref() const;
  /// Waits for the next item; nullopt once the port has completed (kOnce,
  /// kPerMember) or was closed and every item was taken. Throws the port's
  /// failure (ActorStopped, ActorFailed, Error at shutdown) at once.
  std::optional<PortItem> next();
  /// As next(), but throws crown::Timeout after `timeout` (the port stays open).
  std::optional<PortItem> next(std::chrono::milliseconds timeout);
  /// Later items are dropped (quietly), those already here can still be
  /// taken; the table entry goes. Idempotent.
  void close();
  /// Items queued now.
  std::size_t queued() const;
  explicit operator bool() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::PortState> state_;
};

/// A holder's end of a port: copies share one hold per port per proc. When
/// the last copy goes without a send, a kOnce or kPerMember port hears at
/// once that this holder dropped it; when the holding actor stops or dies,
/// the port hears that too, whatever its mode.
class PortHandle {
 public:
  PortHandle() = default;
  explicit PortHandle(std::shared_ptr<detail::PortHold> hold) : hold_(std::move(hold)) {}

  /// The port's address, to hand on (announce set when held away from its owner).
  const PortRef& ref() const;
  /// Sends a value (a stream port's sender may wait for room first: FLO-1).
  /// Dropped when the port is closed; throws MessageTooLarge over the frame limit.
  void send(std::string type, wire::Payload payload) const;
  template <class T>
  void send(const T& value) const {
    send(wire::messageName<T>(), wire::toBytes(value));
  }
  /// Sends an error in place of a value: the receiver's item carries it.
  void sendError(std::exception_ptr error) const;
  explicit operator bool() const { return hold_ != nullptr; }

 private:
  std::shared_ptr<detail::PortHold> hold_;
};

}  // namespace crown
