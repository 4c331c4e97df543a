// Mailboxes: the actors hosted by one Proc, each with its mailbox, drained
// on the Proc's executor one message at a time (at most one thread runs an actor).
// Numbered messages enter a mailbox in send order (ORD-1, through each
// actor's ReorderBuffer); a gap that never fills is given up after
// CROWN_ORDER_GAP_TIMEOUT_MS so nothing waits behind it (DLV-1). Each
// numbered message handled or refused is counted for its sender's flow
// control (FLO-1, flow_control.h). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "actor/flow_control.h"
#include "actor/running_actor.h"
#include "crown/actor/failure.h"
#include "crown/actor/proc.h"

namespace crown::detail {

struct Delivery {
  wire::Envelope envelope;
  wire::Bytes payload;
  Completion complete;  // set: a request's outcome goes here, not to the sender
};

class Mailboxes {
 public:
  /// Sends a reply (or failure) frame answering `request`.
  using ReplyFn = std::function<void(const wire::Envelope& request, wire::MessageKind kind,
                                     std::string type, wire::Payload payload)>;

  Mailboxes(Proc& proc, std::shared_ptr<Executor> pool, ReplyFn reply, FlowControl& flow);
  ~Mailboxes();

  /// Hosts `actor` at `local`; throws ConfigError when the id is taken.
  ActorId host(std::unique_ptr<Actor> actor, std::uint64_t local, std::string name);
  /// Forgets actor `local` (a running handler keeps it alive until it
  /// returns) and refuses what waited in its mailbox; false when there was
  /// none. With `death` (a kActorFailed failure) the actor died: the waiting
  /// messages, and every later one, are refused with it. `onlyStarting`:
  /// only while its first turn (Actor::onStart) has not returned.
  bool remove(std::uint64_t local, const RemoteFailure* death = nullptr,
              bool onlyStarting = false);
  /// `onThisThread`: run the drain on this pool thread right after its
  /// current task (the read that delivered the message), saving a hand-off.
  void enqueue(Delivery&& delivery, bool onThisThread);
  /// DLV-1: a message that cannot be handled fails its request; a one-way
  /// message is logged.
  void refuse(Delivery& delivery, const RemoteFailure& failure);
  /// Stops starting handlers, and waits until those running have returned
  /// (the caller's own, if it is one, excepted) or `deadline` passes.
  void quiesce(std::chrono::steady_clock::time_point deadline);
  /// After quiesce: destroys every hosted actor whose handler is not running,
  /// now, rather than with the last reference to its mailbox (a drain task
  /// left queued in a stopped pool may hold one past the Proc). Actors may
  /// use their Proc until they are destroyed (the tensor engine's streams do).
  void destroyActors();
  /// Actors hosted, messages waiting, messages handled (Proc::stats).
  void count(std::size_t& actors, std::size_t& queued, std::uint64_t& handled);

 private:
  struct Cell;
  void scheduleDrain(const std::shared_ptr<Cell>& cell, bool onThisThread);
  std::shared_ptr<Cell> find(std::uint64_t local);
  /// Why a message to `dest`, which is not hosted here, is refused.
  RemoteFailure absent(const wire::ActorId& dest);
  void replyFailure(const wire::Envelope& request, const RemoteFailure& failure);
  void armGapTimer(const std::shared_ptr<Cell>& cell, ActorId sender,
                   std::chrono::steady_clock::duration delay);
  void drain(const std::shared_ptr<Cell>& cell);
  void run(Actor& actor, Delivery& delivery);
  void consumed(const wire::Envelope& envelope, std::size_t payloadBytes);  // FLO-1

  Proc& proc_;
  FlowControl& flow_;
  std::shared_ptr<Executor> pool_;
  ReplyFn reply_;
  std::chrono::milliseconds gapTimeout_;
  // Drains queued or running; quiesce() waits for them so that replies they
  // send (a Shutdown's acknowledgement, say) are flushed.
  std::atomic<int> activeDrains_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> handled_{0};
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Cell>> cells_;
  // Actors that died, and why: later messages to them are refused with the
  // cause. Local ids are never reused; entries are few (one per dead actor).
  std::unordered_map<std::uint64_t, RemoteFailure> deaths_;
};

}  // namespace crown::detail
