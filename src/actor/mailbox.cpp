#include "actor/mailbox.h"

#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "actor/reorder_buffer.h"
#include "crown/actor/lost_messages.h"
#include "crown/actor/module.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/common/trace.h"

namespace crown {

namespace detail {
struct ActorAccess {
  static void bind(Actor& actor, ActorId id, std::string name) {
    actor.id_ = id;
    actor.name_ = std::move(name);
  }
  static std::string dying(Actor& actor, const std::string& cause) { return actor.dying(cause); }
  static const Handler* find(Actor& actor, const std::string& type) {
    auto it = actor.handlers_.find(type);
    return it == actor.handlers_.end() ? nullptr : &it->second;
  }
};
}  // namespace detail

namespace {
constexpr int kDrainBatch = 64;  // messages per turn before an actor yields its thread
}  // namespace

namespace detail {

using wire::Envelope;
using wire::MessageKind;

// One hosted actor and its mailbox. `scheduled` is true while a drain task
// for it is queued or running, so at most one thread runs it; `order` puts
// numbered messages into the mailbox in send order (ORD-1).
struct Mailboxes::Cell {
  std::unique_ptr<Actor> actor;
  std::mutex mutex;
  std::deque<Delivery> mailbox;
  ReorderBuffer<Delivery> order;
  bool scheduled = false;
  bool running = false;  // a handler runs: destroyActors leaves the actor to its drain
  bool closed = false;   // removed: nothing more is handled, whatever arrives is refused
  bool starting = false;  // its first turn (Actor::onStart) has not returned

  // With `mutex` held: true when the caller must schedule the drain of what
  // the mailbox holds (none is queued or running).
  bool claimDrain() { return !mailbox.empty() && !std::exchange(scheduled, true); }
};

Mailboxes::Mailboxes(Proc& proc, std::shared_ptr<Executor> pool, ReplyFn reply, FlowControl& flow)
    : proc_(proc),
      flow_(flow),
      pool_(std::move(pool)),
      reply_(std::move(reply)),
      gapTimeout_(env::integer("CROWN_ORDER_GAP_TIMEOUT_MS", 10000, 1, 3600000)) {}

Mailboxes::~Mailboxes() = default;

// Never onThisThread from a handler, which may block after sending and so
// hold up the drain it deferred.
void Mailboxes::scheduleDrain(const std::shared_ptr<Cell>& cell, bool onThisThread) {
  ++activeDrains_;
  auto task = [this, cell] { drain(cell); };
  if (onThisThread) {
    pool_->defer(std::move(task));
  } else {
    pool_->post(std::move(task));
  }
}

ActorId Mailboxes::host(std::unique_ptr<Actor> actor, std::uint64_t local, std::string name) {
  CROWN_CHECK(actor != nullptr, "spawnLocal of a null actor");
  ActorId id{proc_.rank(), local};
  ActorAccess::bind(*actor, id, std::move(name));
  auto cell = std::make_shared<Cell>();
  // Actor::onStart: its first turn is queued before the actor can be found,
  // so it runs before any message (and on a pool thread, not the host's).
  bool starts = ActorAccess::find(*actor, kStartTurnType) != nullptr;
  if (starts) {
    Delivery start;
    start.envelope.kind = MessageKind::kOneWay;
    start.envelope.sender = id;
    start.envelope.dest = id;
    start.envelope.type = kStartTurnType;
    cell->mailbox.push_back(std::move(start));
    cell->scheduled = true;
    cell->starting = true;
  }
  cell->actor = std::move(actor);
  {
    std::lock_guard lock(mutex_);
    if (!cells_.emplace(local, cell).second) {
      throw ConfigError("actor id " + wire::toString(id) + " is taken on rank " +
                        std::to_string(proc_.rank()));
    }
  }
  if (starts) {
    scheduleDrain(cell, false);  // actorStarted once its first turn has returned
  } else {
    for (Proc::Module* module : proc_.modules()) module->actorStarted(local);
  }
  return id;
}

bool Mailboxes::remove(std::uint64_t local, const RemoteFailure* death, bool onlyStarting) {
  std::shared_ptr<Cell> cell;
  {
    std::lock_guard lock(mutex_);
    if (death) deaths_.emplace(local, *death);  // also one that never came to be hosted
    auto it = cells_.find(local);
    if (it == cells_.end()) return false;
    if (onlyStarting) {
      // Checked and closed (below) without letting go of mutex_, so a start
      // that returns meanwhile leaves a started actor to the normal stop.
      std::lock_guard cellLock(it->second->mutex);
      if (!it->second->starting) return false;
      it->second->closed = true;
    }
    cell = std::move(it->second);
    cells_.erase(it);
  }
  std::deque<Delivery> waiting;
  {
    std::lock_guard lock(cell->mutex);
    cell->closed = true;
    waiting.swap(cell->mailbox);
    cell->order.takeAll(waiting);
  }
  // DLV-1: what waited fails now, not when the sender gives up.
  RemoteFailure why = death ? *death
                            : RemoteFailure{RemoteFailure::kActorStopped,
                                            "",
                                            "actor '" + cell->actor->name() + "' (" +
                                                wire::toString(cell->actor->id()) +
                                                ") was stopped before it handled this message",
                                            "",
                                            "",
                                            proc_.rank()};
  for (auto& delivery : waiting) refuse(delivery, why);
  return true;  // the actor itself goes with the last reference to its cell (a running drain's)
}

std::shared_ptr<Mailboxes::Cell> Mailboxes::find(std::uint64_t local) {
  std::lock_guard lock(mutex_);
  auto it = cells_.find(local);
  return it == cells_.end() ? nullptr : it->second;
}

RemoteFailure Mailboxes::absent(const wire::ActorId& dest) {
  {
    std::lock_guard lock(mutex_);
    auto it = deaths_.find(dest.local);
    if (it != deaths_.end()) return it->second;
  }
  return RemoteFailure{RemoteFailure::kActorStopped,
                       "",
                       "no actor " + wire::toString(dest) + " (never spawned, or stopped)",
                       "",
                       "",
                       proc_.rank()};
}

void Mailboxes::enqueue(Delivery&& delivery, bool onThisThread) {
  std::shared_ptr<Cell> cell = find(delivery.envelope.dest.local);
  if (!cell) {
    refuse(delivery, absent(delivery.envelope.dest));
    return;
  }
  bool schedule = false;
  std::optional<Delivery> late;
  std::optional<Delivery> tooLate;  // its actor was removed since find()
  {
    std::lock_guard lock(cell->mutex);
    if (cell->closed) {
      tooLate.emplace(std::move(delivery));
    } else if (delivery.envelope.seq == 0) {
      cell->mailbox.push_back(std::move(delivery));
    } else {
      ActorId sender = delivery.envelope.sender;
      std::uint64_t seq = delivery.envelope.seq;
      switch (cell->order.accept(sender, seq, delivery, cell->mailbox)) {
        case ReorderBuffer<Delivery>::Verdict::kHeldFirst:
          armGapTimer(cell, sender, gapTimeout_);
          break;
        case ReorderBuffer<Delivery>::Verdict::kLate:
          late.emplace(std::move(delivery));
          break;
        case ReorderBuffer<Delivery>::Verdict::kDuplicate:
          // A broadcast resent around a lost hop that had come through it
          // already: ORD-1 delivers it once. A request is never resent, so
          // one here is late (its gap forgotten): refused, never dropped (DLV-1).
          if (delivery.envelope.kind == MessageKind::kRequest) late.emplace(std::move(delivery));
          break;
        default:
          break;
      }
    }
    schedule = cell->claimDrain();
  }
  if (schedule) scheduleDrain(cell, onThisThread);
  if (tooLate) refuse(*tooLate, absent(tooLate->envelope.dest));
  if (late) {
    refuse(*late, RemoteFailure{RemoteFailure::kOther, "",
                                "message " + std::to_string(late->envelope.seq) + " from " +
                                    wire::toString(late->envelope.sender) +
                                    " arrived after the order gap timeout had passed it over",
                                "", "", proc_.rank()});
  }
}

// A numbered message that has left the mailbox, handled or refused, frees
// its place in the sender's window (FLO-1).
void Mailboxes::consumed(const Envelope& envelope, std::size_t payloadBytes) {
  if (envelope.seq != 0) flow_.handled(envelope.sender, envelope.dest, envelope.seq, payloadBytes);
}

void Mailboxes::refuse(Delivery& delivery, const RemoteFailure& failure) {
  const Envelope& envelope = delivery.envelope;
  consumed(envelope, delivery.payload.size());
  if (envelope.kind != MessageKind::kRequest) {
    log::get().warn("dropped a {} message: {}", envelope.type, failure.message);
  } else if (delivery.complete) {
    delivery.complete(Outcome{toException(failure), {}, {}});
  } else {
    replyFailure(envelope, failure);
  }
}

void Mailboxes::replyFailure(const Envelope& request, const RemoteFailure& failure) {
  reply_(request, MessageKind::kFailure, kRemoteFailureType, wire::toBytes(failure));
}

// Nothing waits forever behind a gap (ORD-1 with DLV-1): whatever has been
// held for the timeout is delivered, past the gaps before it, and the timer
// runs again for the next held message's own deadline. What was given up is
// reported to the sender's rank (LostMessages), which nobody else could tell.
void Mailboxes::armGapTimer(const std::shared_ptr<Cell>& cell, ActorId sender,
                            std::chrono::steady_clock::duration delay) {
  std::weak_ptr<Cell> weak = cell;
  pool_->after(std::chrono::ceil<std::chrono::milliseconds>(delay), [this, weak, sender] {
    auto cell = weak.lock();
    if (!cell) return;
    bool schedule = false;
    std::optional<LostMessages> lost;
    {
      std::lock_guard lock(cell->mutex);
      if (cell->closed) return;  // removed, or its actor destroyed
      auto now = std::chrono::steady_clock::now();
      std::size_t before = cell->mailbox.size();
      auto result = cell->order.giveUp(sender, now, gapTimeout_, cell->mailbox);
      if (result.next) armGapTimer(cell, sender, *result.next - now);
      if (result.skipped > 0) {
        log::get().warn(
            "{} messages from {} to {} never arrived within {} ms (a cast hop lost?); "
            "delivering the {} that waited for them, and telling rank {}",
            result.skipped, wire::toString(sender), cell->actor->name(), gapTimeout_.count(),
            cell->mailbox.size() - before, sender.rank);
        lost = LostMessages{sender,         cell->actor->id(), cell->actor->name(),
                            result.skipped, result.first,      result.last};
      }
      schedule = cell->claimDrain();
    }
    if (schedule) scheduleDrain(cell, false);
    if (lost) proc_.send(ActorId{sender.rank, kAgentLocalId}, *lost);
  });
}

void Mailboxes::drain(const std::shared_ptr<Cell>& cell) {
  for (int i = 0; i < kDrainBatch; ++i) {
    Delivery delivery;
    bool startTurn = false;  // the first turn is the first message (host())
    {
      std::lock_guard lock(cell->mutex);
      // The previous handler, if any, returned: cleared in this lock, not one of its own.
      cell->running = false;
      if (cell->mailbox.empty() || stopping_ || cell->closed) {
        cell->scheduled = false;
        --activeDrains_;
        return;
      }
      delivery = std::move(cell->mailbox.front());
      cell->mailbox.pop_front();
      cell->running = true;
      startTurn = cell->starting;
    }
    std::size_t payloadBytes = delivery.payload.size();  // the handler may take the payload
    run(*cell->actor, delivery);
    consumed(delivery.envelope, payloadBytes);
    if (startTurn) {
      bool started = false;
      {
        std::lock_guard lock(cell->mutex);
        cell->starting = false;
        started = !cell->closed;  // not dead of it, nor stopped meanwhile
      }
      // Constructed: the modules hear (supervision hands it what waited).
      if (started) {
        for (Proc::Module* module : proc_.modules()) module->actorStarted(cell->actor->id().local);
      }
    }
  }
  {
    std::lock_guard lock(cell->mutex);
    cell->running = false;  // a yielded drain may wait in a stopped pool: not running
  }
  // Yield the thread to other actors; the drain stays counted in activeDrains_.
  pool_->post([this, cell] { drain(cell); });
}

void Mailboxes::count(std::size_t& actors, std::size_t& queued, std::uint64_t& handled) {
  std::vector<std::shared_ptr<Cell>> cells;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [local, cell] : cells_) cells.push_back(cell);
  }
  actors = cells.size();
  queued = 0;
  for (const auto& cell : cells) {
    std::lock_guard lock(cell->mutex);
    queued += cell->mailbox.size();
  }
  handled = handled_.load(std::memory_order_relaxed);
}

void Mailboxes::run(Actor& actor, Delivery& delivery) {
  handled_.fetch_add(1, std::memory_order_relaxed);
  const Envelope& envelope = delivery.envelope;
  std::optional<HandlerResult> result;
  RemoteFailure failure{RemoteFailure::kRaised, "", "", actor.name(), "", proc_.rank()};
  bool fatal = false;  // the actor must die, whatever the message's kind
  std::string cause;   // what a death reports: the error as the user reads it
  {
    RunningActor running(actor, proc_);
    trace::Span span;
    if (trace::on()) [[unlikely]] {
      span.begin("actor", actor.name() + " " + envelope.type,
                 "from " + wire::toString(envelope.sender));
    }
    try {
      const Handler* handler = ActorAccess::find(actor, envelope.type);
      if (!handler) {
        throw Error("actor '" + actor.name() + "' (" + wire::demangle(typeid(actor).name()) +
                    ") has no handler for message type " + envelope.type);
      }
      result = (*handler)(delivery.payload);
    } catch (const std::exception& e) {
      failure.type = wire::demangle(typeid(e).name());
      failure.message = e.what();
      fatal = dynamic_cast<const ActorFatal*>(&e) != nullptr;
      // User code's report names its own error: no C++ type name around it.
      if (fatal || dynamic_cast<const UserCodeError*>(&e) != nullptr) failure.type.clear();
      cause = failure.type.empty() ? failure.message : failure.type + ": " + failure.message;
    } catch (...) {
      failure.type = "unknown exception";
      failure.message = "a handler threw something that is not a std::exception";
      cause = failure.type + ": " + failure.message;
    }
    span.end();  // the handler's run, not what its failure costs after it
  }
  bool oneWay = !delivery.complete && envelope.kind != MessageKind::kRequest;
  if (oneWay && !result) {
    log::get().error("actor '{}' failed handling one-way {}: {}", actor.name(), envelope.type,
                     cause);
  }
  // Design.md's failure model: a user actor whose one-way message failed
  // (nobody else hears of it), or whose handler was fatal, dies. It is
  // removed before its caller hears, so nothing sent after that reaches it;
  // system agents serve on.
  bool dies = !result && (fatal || oneWay) && actor.id().local >= kFirstActorLocalId;
  if (dies) {
    std::string alsoFailed;
    {
      RunningActor running(actor, proc_);  // its last words are its own sends
      alsoFailed = ActorAccess::dying(actor, cause);
    }
    if (!alsoFailed.empty()) cause += "\n" + alsoFailed;
    failure = RemoteFailure{RemoteFailure::kActorFailed, "",          cause, actor.name(),
                            proc_.host(proc_.rank()),    proc_.rank()};
    proc_.failLocal(actor.id().local, ActorFailed(failure.rank, failure.host, actor.name(), cause));
  }
  if (delivery.complete) {
    if (result) {
      delivery.complete(
          Outcome{nullptr, std::move(result->type), std::move(result->payload).join()});
    } else {
      delivery.complete(Outcome{toException(failure), {}, {}});
    }
  } else if (envelope.kind == MessageKind::kRequest) {
    if (result) {
      reply_(envelope, MessageKind::kReply, std::move(result->type), std::move(result->payload));
    } else {
      replyFailure(envelope, failure);
    }
  }
  if (!result && oneWay && !dies) {  // a system agent: it serves on, but the modules hear
    for (Proc::Module* module : proc_.modules())
      module->actorFailed(actor.id(), actor.name(), cause);
  }
}

void Mailboxes::quiesce(std::chrono::steady_clock::time_point deadline) {
  stopping_ = true;
  // From a handler of this Proc's: its own drain (on a pool thread, or on a
  // shared-memory reader that runs handlers itself) stays active meanwhile.
  int ownDrain = runningProc() == &proc_ && runningActor() != nullptr ? 1 : 0;
  while (activeDrains_ > ownDrain && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Mailboxes::destroyActors() {
  std::unordered_map<std::uint64_t, std::shared_ptr<Cell>> cells;
  {
    std::lock_guard lock(mutex_);
    cells.swap(cells_);  // none is found from here on
  }
  for (auto& [local, cell] : cells) {
    std::unique_ptr<Actor> actor;
    {
      std::lock_guard lock(cell->mutex);
      cell->closed = true;
      if (!cell->running) actor = std::move(cell->actor);
    }
    actor.reset();  // outside the cell's lock: its destructor may wait on other actors' work
  }
}

}  // namespace detail
}  // namespace crown
