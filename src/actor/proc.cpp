// The Proc facade: wires its parts (mailbox, request table, router), hosts
// the modules, and implements the public API on top of them.
#include "crown/actor/proc.h"

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_set>

#include "actor/flow_control.h"
#include "actor/mailbox.h"
#include "actor/port_hub.h"
#include "actor/proc_agent.h"
#include "actor/request_table.h"
#include "actor/router.h"
#include "actor/send_sequencer.h"
#include "crown/actor/failure.h"
#include "crown/actor/lost_messages.h"
#include "crown/actor/module.h"
#include "crown/common/log.h"

namespace crown {

namespace {
using detail::Outcome;
using transport::OutMessage;
using wire::Envelope;
using wire::MessageKind;

std::atomic<Proc*> g_firstProc{nullptr};  // Proc::current() outside handlers

}  // namespace

std::uint64_t SystemIds::claim() {
  if (next_ >= kFirstActorLocalId) {
    throw ConfigError("the modules of this Proc claim more than the " +
                      std::to_string(kFirstActorLocalId - kFlowAgentLocalId - 1) + " system ids");
  }
  return next_++;
}

struct Proc::Impl {
  Options options;
  std::unique_ptr<transport::Transport> transport;
  detail::SendSequencer sequencer;
  detail::RequestTable requests;
  detail::FlowControl flow;
  detail::Mailboxes mailboxes;
  detail::Router router;
  std::shared_ptr<detail::PortHub> ports;  // port.h: shared with receivers and handles
  std::vector<std::unique_ptr<Module>> owned;
  std::vector<Module*> modules;
  std::atomic<std::uint64_t> nextLocal{kFirstActorLocalId};
  bool installing = true;  // raw agents may be set only while modules install
  std::atomic<bool> stopped{false};
  std::mutex lostHookMutex;
  mutable std::mutex lostPeersMutex;
  std::unordered_set<Rank> lostPeers;  // each reported once: by a link, or by declareLost
  std::unordered_set<Rank> departingPeers;  // expectDeparture: their loss is no failure
  std::function<void(const LostMessages&)> lostHook;
  mutable std::mutex joinedHostsMutex;
  std::map<Rank, std::string> joinedHosts;  // a node map: host() hands out references

  Impl(Proc& proc, Options opts, std::unique_ptr<transport::Transport> t)
      : options(std::move(opts)),
        transport(std::move(t)),
        sequencer(options.size),
        requests(options.size, options.launched == 0 ? options.size : options.launched,
                 options.rank),
        flow(
            detail::FlowLimits::fromEnv(),
            [this](const detail::Credit& credit) { toFlowAgent(credit.sender.rank, credit); },
            [this](const detail::CreditRequest& ask) { toFlowAgent(ask.dest.rank, ask); },
            [this](Rank rank) { return requests.alive(rank); }),
        mailboxes(
            proc, options.pool,
            [this](const Envelope& request, MessageKind kind, std::string type,
                   wire::Payload payload) {
              router.reply(request, kind, std::move(type), std::move(payload));
            },
            flow),
        router(options.rank, options.size, *transport, requests, mailboxes),
        ports(std::make_shared<detail::PortHub>(
            options.rank, requests, flow, router, [this] { return senderId(); },
            [this, self = &proc](Rank rank) {
              return requests.exists(rank) ? lostError(*self, rank, "lost earlier")
                                           : std::make_exception_ptr(ConfigError(
                                                 "rank " + std::to_string(rank) +
                                                 " does not exist (a vacant slot)"));
            })) {}

  ActorId senderId() const {
    Actor* actor = detail::runningActor();
    return actor ? actor->id() : ActorId{options.rank, 0};
  }

  template <class Message>
  void toFlowAgent(Rank rank, const Message& message) {
    Envelope envelope{MessageKind::kOneWay,
                      {options.rank, kFlowAgentLocalId},
                      {rank, kFlowAgentLocalId},
                      0,
                      wire::messageName<Message>()};
    router.route({std::move(envelope), wire::toBytes(message)});
  }

  // The flow agent's messages, on the thread that read them (never a
  // mailbox: a pool whose threads all wait for credit must still take one).
  void onFlowMessage(const Envelope& envelope, const wire::Bytes& payload) {
    if (envelope.type == wire::messageName<detail::Credit>()) {
      flow.credited(wire::fromBytes<detail::Credit>(payload));
    } else if (envelope.type == wire::messageName<detail::CreditRequest>()) {
      flow.requested(wire::fromBytes<detail::CreditRequest>(payload));
    } else {
      log::get().error("the flow agent takes no {}", envelope.type);
    }
  }

  // Numbers a message to an actor for ORD-1, once its window has room
  // (FLO-1); raw agents take theirs unnumbered and uncounted. An actor's
  // message to itself from its own handler never waits: its mailbox cannot
  // drain before the handler returns.
  void admit(Envelope& envelope, std::size_t payloadBytes) {
    if (router.isRawAgent(envelope.dest.local)) return;
    waitForRoom(envelope.sender, envelope.dest, payloadBytes);
    envelope.seq = sequencer.next(envelope.sender, envelope.dest);
    flow.sent(envelope.sender, envelope.dest, envelope.seq, payloadBytes);
  }

  void waitForRoom(const ActorId& sender, const ActorId& dest, std::size_t payloadBytes) {
    Actor* running = detail::runningActor();
    if (running != nullptr && running->id() == dest) return;
    flow.waitForRoom(sender, dest, payloadBytes);
  }

  std::exception_ptr lostError(Proc& proc, Rank rank, const std::string& reason) const {
    return std::make_exception_ptr(ProcessLost(rank, proc.host(rank), reason));
  }

  // DLV-1 tells a dead peer from a link closed over a bad frame, whose peer
  // is alive: only the first is ProcessLost.
  std::exception_ptr sendError(Proc& proc, Rank to, const transport::LinkError& error) const {
    if (error.peerLost()) return lostError(proc, to, error.toString());
    return std::make_exception_ptr(ProtocolError(
        "a message to rank " + std::to_string(to) + " was not delivered (" + error.toString() +
        "); rank " + std::to_string(to) + " is not lost: later messages open a new link"));
  }

  // The proc agent's thread: a member's report of messages from here it gave up.
  void onLostMessages(const LostMessages& lost) {
    log::get().error("{}", toString(lost));
    std::function<void(const LostMessages&)> hook;
    {
      std::lock_guard lock(lostHookMutex);
      hook = lostHook;
    }
    if (hook) hook(lost);
  }

  // A pool thread, on a link's strand.
  void onPeerLost(Proc& proc, Rank peer, const std::string& reason) {
    {
      std::lock_guard lock(lostPeersMutex);
      if (!lostPeers.insert(peer).second) return;
    }
    log::get().debug("link to rank {} lost: {}", peer, reason);
    auto error = lostError(proc, peer, reason);
    for (auto& complete : requests.markLost(peer)) complete(Outcome{error, {}, {}});
    ports->peerLost(peer, error);
    flow.peerLost(peer);
    for (Module* module : modules) module->peerLost(peer, reason);
  }
};

Proc::Proc(Options options, std::unique_ptr<transport::Transport> transport,
           std::vector<std::string> peers) {
  CROWN_CHECK(options.pool != nullptr, "crown::Proc needs an executor (Options::pool)");
  CROWN_CHECK(transport != nullptr, "crown::Proc needs a Transport");
  impl_ = std::make_unique<Impl>(*this, std::move(options), std::move(transport));
  Impl* impl = impl_.get();
  for (Rank lost : impl->options.lostBefore) {
    impl->requests.markLost(lost);
    impl->lostPeers.insert(lost);
  }
  impl->mailboxes.host(std::make_unique<detail::ProcAgent>(
                           *this, [impl](const LostMessages& lost) { impl->onLostMessages(lost); }),
                       kAgentLocalId, "proc-agent");
  impl->requests.setPortOrphan([impl](const Envelope& envelope, std::size_t bytes) {
    impl->ports->orphan(envelope, bytes);
  });
  SystemIds ids;
  impl->router.setRawAgent(kFlowAgentLocalId, [impl](Envelope&& envelope, wire::Bytes&& payload) {
    impl->onFlowMessage(envelope, payload);
  });
  for (const ModuleFactory& factory : impl_->options.modules) {
    impl_->owned.push_back(factory());
    impl_->modules.push_back(impl_->owned.back().get());
    impl_->modules.back()->install(*this, ids);
  }
  impl_->installing = false;

  transport::TransportCallbacks callbacks;
  callbacks.onMessage = [impl](Rank, wire::Envelope&& envelope, wire::Bytes&& payload) {
    impl->router.deliver(std::move(envelope), std::move(payload), true);
  };
  callbacks.onSendFailed = [impl, this](Rank to, OutMessage&& message,
                                        const transport::LinkError& error) {
    if (message.envelope.kind == MessageKind::kRequest) {
      impl->requests.fail(message.envelope.requestId, impl->sendError(*this, to, error));
    } else if (!error.peerLost()) {
      // A reply or one-way message to a live peer, lost: say so, since its
      // sender learns nothing (a lost peer is reported once, elsewhere).
      static log::RateLimit undeliveredLog;
      if (auto dropped = undeliveredLog.admit()) {
        log::get().error("a {} to rank {} was not delivered: {} ({} such lines dropped)",
                         message.envelope.type, to, error.toString(), *dropped);
      }
    }
  };
  callbacks.onPeerLost = [impl, this](Rank peer, const transport::LinkError& error) {
    impl->onPeerLost(*this, peer, error.toString());
  };
  impl_->transport->start(std::move(peers), std::move(callbacks));
  impl_->options.pool->start();
  for (Module* module : impl_->modules) module->start();
  Proc* none = nullptr;
  g_firstProc.compare_exchange_strong(none, this);
}

Proc::~Proc() {
  stop(std::chrono::milliseconds(0));
  impl_->ports->detach();  // receivers and handles may outlive this Proc
  impl_->mailboxes.destroyActors();  // while every part of this Proc lives
  Proc* self = this;
  g_firstProc.compare_exchange_strong(self, nullptr);
}

Proc& Proc::current() {
  if (Proc* running = detail::runningProc()) return *running;
  Proc* first = g_firstProc.load();
  if (first == nullptr) {
    throw Error("crown is not initialised in this process: call crown::run first");
  }
  return *first;
}

Rank Proc::rank() const { return impl_->options.rank; }
Rank Proc::size() const { return impl_->options.size; }

Proc::Stats Proc::stats() const {
  Stats out;
  impl_->mailboxes.count(out.actors, out.queued, out.handled);
  out.requestsInFlight = impl_->requests.pending();
  return out;
}

const std::string& Proc::host(Rank rank) const {
  static const std::string unknown;
  const auto& hosts = impl_->options.hosts;
  if (hosts && rank < hosts->size() && !(*hosts)[rank].empty()) return (*hosts)[rank];
  std::lock_guard lock(impl_->joinedHostsMutex);
  auto joined = impl_->joinedHosts.find(rank);
  return joined != impl_->joinedHosts.end() ? joined->second : unknown;
}

void Proc::admitRank(Rank rank, const std::string& host, const std::string& address) {
  if (rank >= size() || impl_->requests.exists(rank)) {
    throw ConfigError("rank " + std::to_string(rank) + " cannot join: " +
                      (rank >= size() ? "there are only " + std::to_string(size()) + " rank slots"
                                      : std::string("its slot is taken")));
  }
  {
    std::lock_guard lock(impl_->joinedHostsMutex);
    impl_->joinedHosts.emplace(rank, host);
  }
  impl_->transport->admit(rank, address);  // reachable before anyone sees it alive
  impl_->requests.admit(rank);
  log::get().debug("rank {} joined on {}", rank, host);
}

bool Proc::alive(Rank rank) const { return impl_->requests.alive(rank); }
bool Proc::joined(Rank rank) const { return impl_->requests.exists(rank); }

std::optional<std::chrono::steady_clock::time_point> Proc::lastHeard(Rank rank) const {
  return impl_->transport->lastHeard(rank);
}

void Proc::declareLost(Rank peer, const std::string& reason) {
  CROWN_CHECK(peer < size() && peer != rank(), "declareLost of rank " + std::to_string(peer));
  impl_->onPeerLost(*this, peer, reason);
}

void Proc::expectDeparture(Rank peer) {
  std::lock_guard lock(impl_->lostPeersMutex);
  impl_->departingPeers.insert(peer);
}

bool Proc::departing(Rank peer) const {
  std::lock_guard lock(impl_->lostPeersMutex);
  return impl_->departingPeers.count(peer) != 0;
}

const std::vector<Proc::Module*>& Proc::modules() const { return impl_->modules; }

MpiService& Proc::mpi() const {
  CROWN_CHECK(impl_->options.mpi != nullptr,
              "this proc has no MPI service (a simulated proc, or one made without bootstrap)");
  return *impl_->options.mpi;
}

void Proc::checkSendable(Rank to, std::size_t payloadBytes) const {
  if (impl_->router.tooLarge(to, payloadBytes)) throw impl_->router.tooLargeError(to, payloadBytes);
}

std::uint64_t Proc::requestRaw(const ActorId& dest, std::string type, wire::Payload payload,
                               detail::Completion complete) {
  auto id = impl_->requests.nextId();
  if (impl_->router.tooLarge(dest.rank, payload.size())) {
    complete(Outcome{
        std::make_exception_ptr(impl_->router.tooLargeError(dest.rank, payload.size())), {}, {}});
    return id;
  }
  if (!impl_->requests.add(id, dest.rank, complete)) {
    auto error = impl_->requests.exists(dest.rank)
                     ? impl_->lostError(*this, dest.rank, "lost earlier")
                     : std::make_exception_ptr(ConfigError("rank " + std::to_string(dest.rank) +
                                                           " does not exist (a vacant slot)"));
    complete(Outcome{error, {}, {}});
    return id;
  }
  Envelope envelope{MessageKind::kRequest, impl_->senderId(), dest, id, std::move(type)};
  impl_->admit(envelope, payload.size());
  impl_->router.route({std::move(envelope), std::move(payload)});
  return id;
}

void Proc::sendRaw(const ActorId& dest, std::string type, wire::Payload payload) {
  checkSendable(dest.rank, payload.size());
  Envelope envelope{MessageKind::kOneWay, impl_->senderId(), dest, 0, std::move(type)};
  impl_->admit(envelope, payload.size());
  impl_->router.route({std::move(envelope), std::move(payload)});
}

void Proc::deliverLocal(wire::Envelope envelope, wire::Bytes payload, detail::Completion complete) {
  envelope.dest.rank = impl_->options.rank;
  // From a raw agent on the thread that read the cast (a pool thread, or a
  // shared-memory link's reader), run the actor right after it, as a
  // network delivery does; never defer from inside a handler, which may
  // block afterwards (Mailboxes::enqueue).
  bool onThisThread = impl_->options.pool->inPool() && detail::runningActor() == nullptr;
  impl_->mailboxes.enqueue(
      detail::Delivery{std::move(envelope), std::move(payload), std::move(complete)}, onThisThread);
}

void Proc::reply(const wire::Envelope& request, std::string type, wire::Payload payload) {
  impl_->router.reply(request, MessageKind::kReply, std::move(type), std::move(payload));
}

void Proc::replyFailure(const wire::Envelope& request, std::exception_ptr error) {
  impl_->router.reply(request, MessageKind::kFailure, detail::kRemoteFailureType,
                      wire::toBytes(detail::describeFailure(error, impl_->options.rank)));
}

ActorId Proc::currentSender() const { return impl_->senderId(); }

std::vector<std::uint64_t> Proc::reserveSeqs(const ActorId& sender, std::uint64_t destLocal,
                                             const std::vector<std::size_t>& ranks,
                                             std::size_t payloadBytes) {
  for (std::size_t rank : ranks) {
    impl_->waitForRoom(sender, {static_cast<Rank>(rank), destLocal}, payloadBytes);
  }
  std::vector<std::uint64_t> seqs = impl_->sequencer.next(sender, destLocal, ranks);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    impl_->flow.sent(sender, {static_cast<Rank>(ranks[i]), destLocal}, seqs[i], payloadBytes);
  }
  return seqs;
}

void Proc::cancelRequest(std::uint64_t requestId) { impl_->requests.cancel(requestId); }

ActorId Proc::spawnLocal(std::unique_ptr<Actor> actor, std::string name) {
  return spawnLocalAt(impl_->nextLocal.fetch_add(1), std::move(actor), std::move(name));
}

ActorId Proc::spawnLocalAt(std::uint64_t local, std::unique_ptr<Actor> actor, std::string name) {
  // The modules hear actorStarted from the mailboxes: now, or after the
  // actor's first turn (Actor::onStart) when it has one.
  return impl_->mailboxes.host(std::move(actor), local, std::move(name));
}

void Proc::setRawAgent(std::uint64_t local, RawHandler handler) {
  CROWN_CHECK(impl_->installing, "raw agents are set from Proc::Module::install only");
  CROWN_CHECK(local > kAgentLocalId && local < kFirstActorLocalId,
              "raw agents take the system ids 2.." + std::to_string(kFirstActorLocalId - 1));
  impl_->router.setRawAgent(local, std::move(handler));
}

void Proc::stopLocal(std::uint64_t local) { removeLocal(local, nullptr); }

bool Proc::stopLocalIfStarting(std::uint64_t local) { return removeLocal(local, nullptr, true); }

void Proc::failLocal(std::uint64_t local, const ActorFailed& death) {
  auto failure = detail::describeFailure(std::make_exception_ptr(death), death.rank());
  removeLocal(local, &failure);
  for (Module* module : impl_->modules)
    module->actorFailed(ActorId{impl_->options.rank, local}, death.actor(), death.cause());
}

bool Proc::removeLocal(std::uint64_t local, const detail::RemoteFailure* death,
                       bool onlyStarting) {
  CROWN_CHECK(local != kAgentLocalId, "the proc agent cannot be stopped");
  auto held = impl_->ports->holdsOf(local);  // its handles may go with it in remove()
  if (!impl_->mailboxes.remove(local, death, onlyStarting)) return false;
  impl_->sequencer.forgetSender({impl_->options.rank, local});
  impl_->flow.forgetActor({impl_->options.rank, local});
  // DLV-1: its ports fail, and the ports it held hear it went (port.h).
  auto gone = death ? detail::toException(*death)
                    : std::make_exception_ptr(ActorStopped(
                          "actor " + wire::toString({impl_->options.rank, local}) + " stopped"));
  impl_->ports->ownerGone(local, gone);
  impl_->ports->holderGone(held, gone);
  for (Module* module : impl_->modules) module->actorStopped(local);
  return true;
}

void Proc::forgetDestination(std::uint64_t local) {
  impl_->sequencer.forgetDestination(local);
  impl_->flow.forgetDestination(local);
}

void Proc::forgetDestination(std::uint64_t local, const std::vector<std::size_t>& ranks) {
  impl_->sequencer.forgetDestination(local, ranks);
  impl_->flow.forgetDestination(local, &ranks);
}

void Proc::setLostMessagesHook(std::function<void(const LostMessages&)> hook) {
  std::lock_guard lock(impl_->lostHookMutex);
  impl_->lostHook = std::move(hook);
}

void Proc::stop(std::chrono::milliseconds flushTimeout) {
  if (impl_->stopped.exchange(true)) return;
  for (auto it = impl_->modules.rbegin(); it != impl_->modules.rend(); ++it) (*it)->stop();
  // Let running handlers finish and route their replies (bounded).
  impl_->mailboxes.quiesce(std::chrono::steady_clock::now() + flushTimeout);
  impl_->transport->stop(flushTimeout);
  if (impl_->options.stopsPool) impl_->options.pool->stop();
  auto error = std::make_exception_ptr(Error("crown is shutting down"));
  for (auto& complete : impl_->requests.takeAll()) complete(Outcome{error, {}, {}});
  impl_->ports->shutdown(error);
}

PortReceiver Proc::openPort(PortMode mode, std::vector<Rank> watched) {
  return impl_->ports->open(mode, std::move(watched));
}

PortHandle Proc::holdPort(const PortRef& port) { return impl_->ports->hold(port); }

std::size_t Proc::openPorts() const { return impl_->requests.ports(); }

}  // namespace crown
