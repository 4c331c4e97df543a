#include "crown/actor/proc.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "actor/proc_agent.h"
#include "actor/reorder_buffer.h"
#include "actor/send_sequencer.h"
#include "crown/actor/failure.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown {

namespace detail {
struct ActorAccess {
  static void bind(Actor& actor, ActorId id, std::string name) {
    actor.id_ = id;
    actor.name_ = std::move(name);
  }
  static const Handler* find(Actor& actor, const std::string& type) {
    auto it = actor.handlers_.find(type);
    return it == actor.handlers_.end() ? nullptr : &it->second;
  }
};
}  // namespace detail

namespace {

using detail::Outcome;
using transport::OutMessage;
using wire::Envelope;
using wire::MessageKind;

constexpr int kDrainBatch = 64;  // messages per turn before an actor yields its thread

Proc* g_proc = nullptr;                      // the first Proc of the process
thread_local Proc* t_currentProc = nullptr;  // the Proc running a handler on this thread
thread_local Actor* t_currentActor = nullptr;

using detail::RemoteFailure;
using detail::toException;

struct Delivery {
  Envelope envelope;
  wire::Bytes payload;
  detail::Completion complete;  // set: a request's outcome goes here, not to the sender
};

// One hosted actor and its mailbox. `scheduled` is true while a drain task
// for it is queued or running, so at most one thread runs it; `order` puts
// numbered messages into the mailbox in send order (ORD-1).
struct Cell {
  std::unique_ptr<Actor> actor;
  std::mutex mutex;
  std::deque<Delivery> mailbox;
  detail::ReorderBuffer<Delivery> order;
  bool scheduled = false;
};

struct Pending {
  Rank dest = 0;
  detail::Completion complete;
};

}  // namespace

struct Proc::Impl {
  Proc* self;
  Options options;
  std::unique_ptr<transport::Transport> transport;
  std::shared_ptr<transport::IoPool> pool;
  // Drains queued or running; stop() waits for them so that replies they
  // send (a Shutdown's acknowledgement, say) are flushed.
  std::atomic<int> activeDrains{0};
  std::atomic<bool> stopping{false};

  std::mutex actorsMutex;
  std::unordered_map<std::uint64_t, std::shared_ptr<Cell>> actors;
  std::atomic<std::uint64_t> nextLocal{kFirstActorLocalId};
  std::unordered_map<std::uint64_t, RawHandler> rawAgents;  // fixed once the transport starts
  detail::SendSequencer sequencer;
  std::chrono::milliseconds gapTimeout;

  // Guards pending and lost together, so a request is either registered
  // before its peer is marked lost (and failed by the sweep) or sees the mark.
  std::mutex pendingMutex;
  std::unordered_map<std::uint64_t, Pending> pending;
  std::vector<bool> lost;
  std::atomic<std::uint64_t> nextRequest{1};

  std::mutex shutdownMutex;
  std::condition_variable shutdownCv;
  std::optional<int> shutdownCode;
  std::atomic<bool> unexpectedLoss{false};
  std::function<void(Rank, const std::string&)> peerLostHandler;

  Impl(Proc* proc, Options opts, std::unique_ptr<transport::Transport> t)
      : self(proc),
        options(std::move(opts)),
        transport(std::move(t)),
        pool(options.pool),
        sequencer(options.size),
        gapTimeout(env::integer("CROWN_ORDER_GAP_TIMEOUT_MS", 10000, 1, 3600000)) {
    CROWN_CHECK(pool != nullptr, "crown::Proc needs an IoPool");
    lost.assign(options.size, false);
  }

  // `onThisThread`: run the drain on this pool thread after its current
  // task (the network read that delivered the message), saving a hand-off.
  // Never from a handler, which may block after sending and so hold up the
  // drain it deferred.
  void scheduleDrain(const std::shared_ptr<Cell>& cell, bool onThisThread) {
    ++activeDrains;
    auto task = [this, cell] { drain(cell); };
    if (onThisThread) {
      pool->defer(std::move(task));
    } else {
      pool->post(std::move(task));
    }
  }

  ActorId host(std::unique_ptr<Actor> actor, std::uint64_t local, std::string name) {
    CROWN_CHECK(actor != nullptr, "spawnLocal of a null actor");
    ActorId id{options.rank, local};
    detail::ActorAccess::bind(*actor, id, std::move(name));
    auto cell = std::make_shared<Cell>();
    cell->actor = std::move(actor);
    std::lock_guard lock(actorsMutex);
    if (!actors.emplace(local, std::move(cell)).second) {
      throw ConfigError("actor id " + wire::toString(id) + " is taken on rank " +
                        std::to_string(options.rank));
    }
    return id;
  }

  // With cell.mutex held: true when the caller must schedule the drain of
  // what the mailbox holds (none is queued or running).
  static bool claimDrain(Cell& cell) {
    return !cell.mailbox.empty() && !std::exchange(cell.scheduled, true);
  }

  std::shared_ptr<Cell> findCell(std::uint64_t local) {
    std::lock_guard lock(actorsMutex);
    auto it = actors.find(local);
    return it == actors.end() ? nullptr : it->second;
  }

  // ORD-1: number messages to actors; raw agents take theirs unnumbered.
  void numberForOrder(Envelope& envelope) {
    if (!rawAgents.count(envelope.dest.local))
      envelope.seq = sequencer.next(envelope.sender, envelope.dest);
  }

  ActorId senderId() const {
    return t_currentActor ? t_currentActor->id() : ActorId{options.rank, 0};
  }

  std::exception_ptr lostError(Rank rank, const std::string& reason) const {
    return std::make_exception_ptr(ProcessLost(rank, self->host(rank), reason));
  }

  void route(OutMessage message) {
    Rank to = message.envelope.dest.rank;
    if (to == options.rank) {
      deliver(std::move(message.envelope), std::move(message.payload), false);
      return;
    }
    if (to >= options.size) {
      failMessage(message, std::make_exception_ptr(
                               ConfigError("rank " + std::to_string(to) + " does not exist (size " +
                                           std::to_string(options.size) + ")")));
      return;
    }
    transport->send(to, std::move(message));
  }

  void failMessage(const OutMessage& message, std::exception_ptr error) {
    if (message.envelope.kind == MessageKind::kRequest)
      failPending(message.envelope.requestId, error);
  }

  void failPending(std::uint64_t id, std::exception_ptr error) {
    detail::Completion complete;
    {
      std::lock_guard lock(pendingMutex);
      auto it = pending.find(id);
      if (it == pending.end()) return;
      complete = std::move(it->second.complete);
      pending.erase(it);
    }
    complete(Outcome{error, {}, {}});
  }

  // A pool thread that read it (fromNetwork), or the sender's thread (local).
  void deliver(Envelope&& envelope, wire::Bytes&& payload, bool fromNetwork) {
    switch (envelope.kind) {
      case MessageKind::kReply:
      case MessageKind::kFailure:
        completeRequest(std::move(envelope), std::move(payload));
        return;
      case MessageKind::kHeartbeat:  // consumed by the transport; never reaches here
        return;
      case MessageKind::kRequest:
      case MessageKind::kOneWay:
        break;
    }
    if (auto raw = rawAgents.find(envelope.dest.local); raw != rawAgents.end()) {
      raw->second(std::move(envelope), std::move(payload));
      return;
    }
    enqueue(Delivery{std::move(envelope), std::move(payload), nullptr}, fromNetwork);
  }

  void enqueue(Delivery&& delivery, bool fromNetwork) {
    std::shared_ptr<Cell> cell = findCell(delivery.envelope.dest.local);
    if (!cell) {
      std::string why =
          "no actor " + wire::toString(delivery.envelope.dest) + " (never spawned, or stopped)";
      refuse(delivery, RemoteFailure{RemoteFailure::kActorStopped, "", why, "", "", options.rank});
      return;
    }
    bool schedule = false;
    std::optional<Delivery> late;
    {
      std::lock_guard lock(cell->mutex);
      if (delivery.envelope.seq == 0) {
        cell->mailbox.push_back(std::move(delivery));
      } else {
        ActorId sender = delivery.envelope.sender;
        std::uint64_t seq = delivery.envelope.seq;
        switch (cell->order.accept(sender, seq, delivery, cell->mailbox)) {
          case detail::ReorderBuffer<Delivery>::Verdict::kHeldFirst:
            armGapTimer(cell, sender, cell->order.expected(sender));
            break;
          case detail::ReorderBuffer<Delivery>::Verdict::kLate:
            late.emplace(std::move(delivery));
            break;
          default:
            break;
        }
      }
      schedule = claimDrain(*cell);
    }
    if (schedule) scheduleDrain(cell, fromNetwork);
    if (late) {
      refuse(*late, RemoteFailure{RemoteFailure::kOther, "",
                                  "message " + std::to_string(late->envelope.seq) + " from " +
                                      wire::toString(late->envelope.sender) +
                                      " arrived after the order gap timeout had passed it over",
                                  "", "", options.rank});
    }
  }

  // DLV-1: a message that cannot be handled fails its request; a one-way
  // message is logged.
  void refuse(Delivery& delivery, const RemoteFailure& failure) {
    const Envelope& envelope = delivery.envelope;
    if (envelope.kind != MessageKind::kRequest) {
      log::get().warn("dropped a {} message: {}", envelope.type, failure.message);
    } else if (delivery.complete) {
      delivery.complete(Outcome{toException(failure), {}, {}});
    } else {
      replyFailure(envelope, failure);
    }
  }

  // Nothing waits forever behind a gap (ORD-1 with DLV-1): if sender is
  // still stuck at `stuckAt` when the timer fires, the gap is skipped.
  void armGapTimer(const std::shared_ptr<Cell>& cell, ActorId sender, std::uint64_t stuckAt) {
    std::weak_ptr<Cell> weak = cell;
    pool->after(gapTimeout, [this, weak, sender, stuckAt] {
      auto cell = weak.lock();
      if (!cell) return;
      bool schedule = false;
      {
        std::lock_guard lock(cell->mutex);
        std::size_t before = cell->mailbox.size();
        if (cell->order.giveUp(sender, stuckAt, cell->mailbox)) {
          armGapTimer(cell, sender, cell->order.expected(sender));
        }
        if (cell->mailbox.size() > before && cell->order.expected(sender) != stuckAt) {
          log::get().warn(
              "messages from {} to {} before number {} never arrived within {} ms "
              "(a cast hop lost?); delivering the later ones",
              wire::toString(sender), cell->actor->name(), stuckAt, gapTimeout.count());
        }
        schedule = claimDrain(*cell);
      }
      if (schedule) scheduleDrain(cell, false);
    });
  }

  void completeRequest(Envelope&& envelope, wire::Bytes&& payload) {
    detail::Completion complete;
    {
      std::lock_guard lock(pendingMutex);
      auto it = pending.find(envelope.requestId);
      if (it == pending.end()) return;  // cancelled (timed out): the late reply is dropped
      complete = std::move(it->second.complete);
      pending.erase(it);
    }
    if (envelope.kind == MessageKind::kReply) {
      complete(Outcome{nullptr, std::move(envelope.type), std::move(payload)});
      return;
    }
    std::exception_ptr error;
    try {
      error = toException(wire::fromBytes<RemoteFailure>(payload));
    } catch (...) {
      error = std::current_exception();
    }
    complete(Outcome{error, {}, {}});
  }

  void drain(const std::shared_ptr<Cell>& cell) {
    for (int i = 0; i < kDrainBatch; ++i) {
      Delivery delivery;
      {
        std::lock_guard lock(cell->mutex);
        if (cell->mailbox.empty() || stopping) {
          cell->scheduled = false;
          --activeDrains;
          return;
        }
        delivery = std::move(cell->mailbox.front());
        cell->mailbox.pop_front();
      }
      run(*cell->actor, delivery);
    }
    // Yield the thread to other actors; the drain stays counted in activeDrains.
    pool->post([this, cell] { drain(cell); });
  }

  void run(Actor& actor, Delivery& delivery) {
    const Envelope& envelope = delivery.envelope;
    Actor* outer = std::exchange(t_currentActor, &actor);
    Proc* outerProc = std::exchange(t_currentProc, self);
    std::optional<detail::HandlerResult> result;
    RemoteFailure failure{RemoteFailure::kRaised, "", "", actor.name(), "", options.rank};
    try {
      const detail::Handler* handler = detail::ActorAccess::find(actor, envelope.type);
      if (!handler) {
        throw Error("actor '" + actor.name() + "' (" + wire::demangle(typeid(actor).name()) +
                    ") has no handler for message type " + envelope.type);
      }
      result = (*handler)(delivery.payload);
    } catch (const std::exception& e) {
      failure.type = wire::demangle(typeid(e).name());
      failure.message = e.what();
    } catch (...) {
      failure.type = "unknown exception";
      failure.message = "a handler threw something that is not a std::exception";
    }
    t_currentActor = outer;
    t_currentProc = outerProc;
    if (delivery.complete) {
      if (result) {
        delivery.complete(Outcome{nullptr, std::move(result->type), std::move(result->payload)});
      } else {
        delivery.complete(Outcome{toException(failure), {}, {}});
      }
      return;
    }
    if (envelope.kind != MessageKind::kRequest) {
      if (!result) {
        log::get().error("actor '{}' failed handling one-way {}: {}: {}", actor.name(),
                         envelope.type, failure.type, failure.message);
      }
      return;
    }
    if (result) {
      reply(envelope, MessageKind::kReply, std::move(result->type), std::move(result->payload));
    } else {
      replyFailure(envelope, failure);
    }
  }

  void reply(const Envelope& request, MessageKind kind, std::string type, wire::Bytes payload) {
    Envelope envelope{kind, request.dest, request.sender, request.requestId, std::move(type)};
    route({std::move(envelope), std::move(payload)});
  }

  void replyFailure(const Envelope& request, const RemoteFailure& failure) {
    reply(request, MessageKind::kFailure, "crown::RemoteFailure", wire::toBytes(failure));
  }

  // A pool thread, on a link's strand.
  void onPeerLost(Rank peer, const std::string& reason) {
    std::vector<detail::Completion> failed;
    {
      std::lock_guard lock(pendingMutex);
      lost[peer] = true;
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.dest == peer) {
          failed.push_back(std::move(it->second.complete));
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
    }
    bool shuttingDown = false;
    {
      std::lock_guard lock(shutdownMutex);
      shuttingDown = shutdownCode.has_value();
    }
    if (!shuttingDown) {
      unexpectedLoss = true;
      log::get().warn("lost rank {}: {}", peer, reason);
    }
    auto error = lostError(peer, reason);
    for (auto& complete : failed) complete(Outcome{error, {}, {}});
    if (peerLostHandler) peerLostHandler(peer, reason);
  }
};

Proc::Proc(Options options, std::unique_ptr<transport::Transport> transport,
           std::vector<transport::Endpoint> peers)
    : impl_(std::make_unique<Impl>(this, std::move(options), std::move(transport))) {
  impl_->host(std::make_unique<detail::ProcAgent>(*this), kAgentLocalId, "proc-agent");
  if (impl_->options.installAgents) impl_->options.installAgents(*this);
  transport::TransportCallbacks callbacks;
  callbacks.onMessage = [impl = impl_.get()](Rank, wire::Envelope&& envelope,
                                             wire::Bytes&& payload) {
    impl->deliver(std::move(envelope), std::move(payload), true);
  };
  callbacks.onSendFailed = [impl = impl_.get()](Rank to, OutMessage&& message,
                                                const std::string& reason) {
    impl->failMessage(message, impl->lostError(to, reason));
  };
  callbacks.onPeerLost = [impl = impl_.get()](Rank peer, const std::string& reason) {
    impl->onPeerLost(peer, reason);
  };
  impl_->transport->start(std::move(peers), std::move(callbacks));
  impl_->pool->start();
  if (g_proc == nullptr) g_proc = this;
}

Proc::~Proc() {
  stop(std::chrono::milliseconds(0));
  if (g_proc == this) g_proc = nullptr;
}

const Actor* Actor::current() { return t_currentActor; }

Proc& Proc::current() {
  if (t_currentProc != nullptr) return *t_currentProc;
  if (g_proc == nullptr) {
    throw Error("crown is not initialised in this process: call crown::run first");
  }
  return *g_proc;
}

Rank Proc::rank() const { return impl_->options.rank; }
Rank Proc::size() const { return impl_->options.size; }

const std::string& Proc::host(Rank rank) const {
  static const std::string unknown;
  const auto& hosts = impl_->options.hosts;
  return hosts && rank < hosts->size() ? (*hosts)[rank] : unknown;
}

bool Proc::alive(Rank rank) const {
  std::lock_guard lock(impl_->pendingMutex);
  return rank < impl_->lost.size() && !impl_->lost[rank];
}

std::uint64_t Proc::requestRaw(const ActorId& dest, std::string type, wire::Bytes payload,
                               detail::Completion complete) {
  auto id = impl_->nextRequest.fetch_add(1);
  std::exception_ptr refused;
  {
    std::lock_guard lock(impl_->pendingMutex);
    if (dest.rank < impl_->lost.size() && impl_->lost[dest.rank]) {
      refused = impl_->lostError(dest.rank, "lost earlier");
    } else {
      impl_->pending.emplace(id, Pending{dest.rank, std::move(complete)});
    }
  }
  if (refused) {
    complete(Outcome{refused, {}, {}});
    return id;
  }
  Envelope envelope{MessageKind::kRequest, impl_->senderId(), dest, id, std::move(type)};
  impl_->numberForOrder(envelope);
  impl_->route({std::move(envelope), std::move(payload)});
  return id;
}

void Proc::sendRaw(const ActorId& dest, std::string type, wire::Bytes payload) {
  Envelope envelope{MessageKind::kOneWay, impl_->senderId(), dest, 0, std::move(type)};
  impl_->numberForOrder(envelope);
  impl_->route({std::move(envelope), std::move(payload)});
}

void Proc::deliverLocal(wire::Envelope envelope, wire::Bytes payload, detail::Completion complete) {
  envelope.dest.rank = impl_->options.rank;
  // From a raw agent on the pool thread that read the cast, run the actor
  // right after it, as a network delivery does; never defer from inside a
  // handler, which may block afterwards (see scheduleDrain).
  bool onThisThread = impl_->pool->inPool() && t_currentActor == nullptr;
  impl_->enqueue(Delivery{std::move(envelope), std::move(payload), std::move(complete)},
                 onThisThread);
}

void Proc::reply(const wire::Envelope& request, std::string type, wire::Bytes payload) {
  impl_->reply(request, MessageKind::kReply, std::move(type), std::move(payload));
}

void Proc::replyFailure(const wire::Envelope& request, std::exception_ptr error) {
  impl_->replyFailure(request, detail::describeFailure(error, impl_->options.rank));
}

ActorId Proc::currentSender() const { return impl_->senderId(); }

std::vector<std::uint64_t> Proc::reserveSeqs(const ActorId& sender, std::uint64_t destLocal,
                                             const std::vector<std::size_t>& ranks) {
  return impl_->sequencer.next(sender, destLocal, ranks);
}

void Proc::cancelRequest(std::uint64_t requestId) {
  std::lock_guard lock(impl_->pendingMutex);
  impl_->pending.erase(requestId);
}

ActorId Proc::spawnLocal(std::unique_ptr<Actor> actor, std::string name) {
  return impl_->host(std::move(actor), impl_->nextLocal.fetch_add(1), std::move(name));
}

ActorId Proc::spawnLocalAt(std::uint64_t local, std::unique_ptr<Actor> actor, std::string name) {
  return impl_->host(std::move(actor), local, std::move(name));
}

void Proc::setRawAgent(std::uint64_t local, RawHandler handler) {
  CROWN_CHECK(local > kAgentLocalId && local < kFirstActorLocalId,
              "raw agents take the system ids 2.." + std::to_string(kFirstActorLocalId - 1));
  impl_->rawAgents[local] = std::move(handler);
}

void Proc::stopLocal(std::uint64_t local) {
  CROWN_CHECK(local != kAgentLocalId, "the proc agent cannot be stopped");
  std::lock_guard lock(impl_->actorsMutex);
  impl_->actors.erase(local);  // a running handler keeps its cell alive until it returns
}

void Proc::setPeerLostHandler(std::function<void(Rank, const std::string&)> handler) {
  impl_->peerLostHandler = std::move(handler);
}

void Proc::requestShutdown(int code, bool ranksLost) {
  {
    std::lock_guard lock(impl_->shutdownMutex);
    if (impl_->shutdownCode) return;
    impl_->shutdownCode = code;
    if (ranksLost) impl_->unexpectedLoss = true;
  }
  impl_->shutdownCv.notify_all();
}

bool Proc::ranksLost() const { return impl_->unexpectedLoss; }

int Proc::waitForShutdown() {
  std::unique_lock lock(impl_->shutdownMutex);
  impl_->shutdownCv.wait(lock, [this] { return impl_->shutdownCode.has_value(); });
  return *impl_->shutdownCode;
}

void Proc::stop(std::chrono::milliseconds flushTimeout) {
  {
    std::lock_guard lock(impl_->shutdownMutex);
    if (!impl_->shutdownCode) impl_->shutdownCode = 0;
  }
  if (impl_->stopping.exchange(true)) return;
  // Let running handlers finish and route their replies (bounded).
  auto deadline = std::chrono::steady_clock::now() + flushTimeout;
  int ownDrain = impl_->pool->inPool() ? 1 : 0;  // stop() called from a handler
  while (impl_->activeDrains > ownDrain && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->transport->stop(flushTimeout);
  if (impl_->options.stopsPool) impl_->pool->stop();
  std::vector<detail::Completion> orphans;
  {
    std::lock_guard lock(impl_->pendingMutex);
    for (auto& [id, pending] : impl_->pending) orphans.push_back(std::move(pending.complete));
    impl_->pending.clear();
  }
  auto error = std::make_exception_ptr(Error("crown is shutting down"));
  for (auto& complete : orphans) complete(Outcome{error, {}, {}});
}

}  // namespace crown
