// The Proc facade: builds its parts (proc_impl.h), hosts the modules, and
// implements the public API on top of them; its hosted actors' part is in
// proc_actors.cpp.
#include "crown/actor/proc.h"

#include "actor/proc_agent.h"
#include "actor/proc_impl.h"

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
