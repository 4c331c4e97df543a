// Proc: the actor kernel of one process (or of one simulated proc, SIM-1).
// Its parts, each in its own file of src/actor:
//   mailbox.cpp        hosted actors, their mailboxes and drains (ORD-1 reordering)
//   request_table.cpp  requests waiting for replies (DLV-1)
//   router.cpp         where a message goes: a local mailbox, a raw agent, the transport
// and the modules hosted on it (module.h): every layer above the kernel
// (mesh, bootstrap's lifecycle, ...) plugs in as a Proc::Module with its own
// system ids and its own per-Proc state. Thread-safe: any thread may send
// or request.
//
// Every Proc also hosts the proc agent (local id 1), which spawns actors by
// registered type and stops them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "crown/actor/actor.h"
#include "crown/actor/future.h"
#include "crown/actor/port.h"
#include "crown/common/executor.h"
#include "crown/transport/transport.h"

namespace crown {

namespace detail {
struct RemoteFailure;  // failure.h

/// How a request ended, before the reply is decoded into its type.
struct Outcome {
  std::exception_ptr error;  ///< set on failure
  std::string type;          ///< reply type name
  wire::Bytes payload;
};
using Completion = std::function<void(Outcome&&)>;

/// Decodes an Outcome into a Future<R>'s state.
template <class R>
void completeFuture(FutureState<R>& state, Outcome&& outcome) {
  if (outcome.error) return state.setError(outcome.error);
  using S = Stored<R>;
  if (outcome.type != wire::messageName<S>()) {
    return state.setError(std::make_exception_ptr(
        ProtocolError("reply of type " + outcome.type + " where " + wire::messageName<S>() +
                      " was expected: check the reply type given to call<R>()")));
  }
  if constexpr (std::is_void_v<R>) return state.setValue(Unit{});  // nothing to decode
  try {
    state.setValue(wire::fromBytes<S>(outcome.payload));
  } catch (...) {
    state.setError(std::current_exception());
  }
}
}  // namespace detail

constexpr std::uint64_t kAgentLocalId = 1;
/// The raw agent that takes flow control's credits (FLO-1), on every Proc.
constexpr std::uint64_t kFlowAgentLocalId = 2;
/// Local ids below this are the system agents' (the proc agent, the flow agent, and those
/// the modules claim through SystemIds); actors spawned one by one get ids
/// from here up.
constexpr std::uint64_t kFirstActorLocalId = 16;

class MpiService;     // mpi_service.h
struct LostMessages;  // lost_messages.h

class Proc {
 public:
  class Module;  // module.h
  using ModuleFactory = std::function<std::unique_ptr<Module>()>;

  struct Options {
    Rank rank = 0;
    /// Rank slots: those of the launch, and spares for ranks that join later
    /// (replacements respawned for lost ones; admitRank).
    Rank size = 1;
    /// Host name of every rank; shared, since the simulated procs of one
    /// process would otherwise hold V copies of V names each. Null: unknown.
    std::shared_ptr<const std::vector<std::string>> hosts;
    /// Threads for actors and links alike; the transport must run on it too.
    std::shared_ptr<Executor> pool;
    /// stop() also stops the pool. False when several Procs share it (the
    /// simulated procs of SIM-1): then whoever made the pool stops it, after
    /// every Proc's stop() and before any Proc is destroyed.
    bool stopsPool = true;
    /// The modules this Proc hosts, installed in this order before the
    /// transport starts (the same list on every rank: module.h).
    std::vector<ModuleFactory> modules;
    /// MPI for the layers above (bootstrap's service thread, THR-1); null
    /// where there is none (simulated procs).
    std::shared_ptr<MpiService> mpi;
    /// Ranks [0, launched) (and this one) are present from the start; the
    /// rest are vacant until they join. 0: every slot is present.
    Rank launched = 0;
    /// Ranks lost before this proc started (a replacement joining a job that
    /// had lost them): marked lost quietly, as nobody here waits on them.
    std::vector<Rank> lostBefore;
  };

  /// A system agent that takes its messages, envelope and all, on the
  /// delivering thread (no mailbox, no ORD-1 buffering): for routing agents
  /// that forward and answer later. Must not block.
  using RawHandler = std::function<void(wire::Envelope&&, wire::Bytes&&)>;

  /// Starts serving: the transport is started with `peers` (every rank's
  /// address, as its transport gave it; transport.h).
  Proc(Options options, std::unique_ptr<transport::Transport> transport,
       std::vector<std::string> peers);
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  /// The Proc whose actor this thread is running, else the process's first
  /// Proc; throws crown::Error before bootstrap.
  static Proc& current();

  Rank rank() const;
  /// What this proc holds and has done, for status views (crown status).
  struct Stats {
    std::size_t actors = 0;            ///< hosted, system agents included
    std::size_t queued = 0;            ///< messages waiting in their mailboxes
    std::size_t requestsInFlight = 0;  ///< sent by this proc, not yet answered
    std::uint64_t handled = 0;         ///< messages handled since start
  };
  Stats stats() const;
  /// Rank slots (Options::size): every rank is below it, not every slot is filled.
  Rank size() const;
  /// The host name of rank ("" when unknown).
  const std::string& host(Rank rank) const;
  /// Joined and not lost.
  bool alive(Rank rank) const;
  /// Joined once (alive, or lost since): not a vacant slot.
  bool joined(Rank rank) const;
  /// When this proc's transport last heard from `rank` (a frame or a
  /// heartbeat; Transport::lastHeard): nullopt for this proc itself, a rank
  /// with no live link to it, or a transport that keeps no such time.
  std::optional<std::chrono::steady_clock::time_point> lastHeard(Rank rank) const;
  /// A vacant slot's rank joined: a process started to replace a lost one,
  /// on `host`, listening at `address` (its transport's). From here on it is
  /// alive and reachable. Throws ConfigError when the slot is not vacant or
  /// no backend reaches the address. Any thread.
  void admitRank(Rank rank, const std::string& host, const std::string& address);
  /// Another rank (the controller) saw `peer` die: it is lost here too, as if
  /// this rank's own link had failed (requests to it fail, the modules hear
  /// peerLost), unless this rank already knew. A rank that never opened a
  /// link to `peer` would otherwise never learn it, and wait on it for good
  /// (an MPI collective with it, say: DLV-1). Any thread.
  void declareLost(Rank peer, const std::string& reason);
  /// `peer` is leaving by design (the procs it belongs to were stopped:
  /// ProcMesh.stop()): when its links close it is gone like a lost rank
  /// (requests to it fail, the modules hear peerLost), but departing(peer)
  /// tells them it is no failure to report. Any thread.
  void expectDeparture(Rank peer);
  /// expectDeparture(peer) was called on this proc.
  bool departing(Rank peer) const;

  /// The installed module of type M, or nullptr.
  template <class M>
  M* findModule() const {
    for (Module* module : modules())
      if (auto* found = dynamic_cast<M*>(module)) return found;
    return nullptr;
  }
  const std::vector<Module*>& modules() const;
  /// The MPI service of this process; throws crown::Error where there is none.
  MpiService& mpi() const;

  /// Sends `message` to `dest` and returns the future of its reply.
  template <class R, class Msg>
  Future<R> request(const ActorId& dest, const Msg& message) {
    auto state = std::make_shared<detail::FutureState<R>>();
    auto id = requestRaw(dest, wire::messageName<Msg>(), wire::toBytes(message),
                         [state](detail::Outcome&& outcome) {
                           detail::completeFuture<R>(*state, std::move(outcome));
                         });
    state->setCanceller([this, id] { cancelRequest(id); });
    return Future<R>(state);
  }

  /// Fire and forget.
  template <class Msg>
  void send(const ActorId& dest, const Msg& message) {
    sendRaw(dest, wire::messageName<Msg>(), wire::toBytes(message));
  }

  /// Opens a port (port.h) owned by the running actor (else by this proc,
  /// {rank, 0}): it fails when that actor stops or dies, or at shutdown,
  /// and reports each of `watched` (kPerMember: its members) that is lost.
  PortReceiver openPort(PortMode mode, std::vector<Rank> watched = {});
  /// This proc's hold on `port`, shared by every handle to it here, held by
  /// the running actor (else by this proc).
  PortHandle holdPort(const PortRef& port);
  /// Ports open on this proc.
  std::size_t openPorts() const;

  /// Hosts `actor` on this rank under `name`.
  ActorId spawnLocal(std::unique_ptr<Actor> actor, std::string name);
  /// Hosts `actor` under a chosen local id (a mesh actor's). Throws
  /// ConfigError when the id is taken.
  ActorId spawnLocalAt(std::uint64_t local, std::unique_ptr<Actor> actor, std::string name);
  /// Only from Module::install: messages to `local` go to `handler`.
  void setRawAgent(std::uint64_t local, RawHandler handler);
  /// Stops a local actor after the message it is handling; later messages
  /// fail with ActorStopped. Its order state goes with it, and the modules
  /// hear of it (Module::actorStopped).
  void stopLocal(std::uint64_t local);
  /// As stopLocal, but only while the actor's first turn (Actor::onStart: a
  /// Python actor's __init__) has not returned, without waiting for it: a
  /// member stuck in its constructor can be stopped. False when it had
  /// started (stop it after its messages, then) or is not hosted.
  bool stopLocalIfStarting(std::uint64_t local);
  /// As stopLocal, for an actor that died of `death` (design.md's failure
  /// model): what waits in its mailbox, and every later message, is refused
  /// with it (ActorFailed), not as stopped; then the modules hear
  /// (Module::actorFailed). Also for an actor whose constructor failed, so
  /// never hosted: messages to its id are refused with the cause.
  void failLocal(std::uint64_t local, const ActorFailed& death);
  /// Forgets the ORD-1 counters of messages sent from here to actor `local`
  /// of any rank: for a mesh that was stopped, whose id is never reused.
  void forgetDestination(std::uint64_t local);
  /// The same for actor `local` of `ranks` only: a stopped slice of a mesh,
  /// whose other members keep their ORD-1 order.
  void forgetDestination(std::uint64_t local, const std::vector<std::size_t>& ranks);

  /// A member gave up waiting for messages sent from this rank (an ORD-1
  /// gap given up: broadcasts lost with a cast hop, beyond what could be
  /// resent). The report is logged at error level, then handed to `hook` on
  /// a pool thread: the seam of supervision (Python's unhandled_fault_hook).
  /// Empty: only logged. Any thread; replaces the hook set before.
  void setLostMessagesHook(std::function<void(const LostMessages&)> hook);

  /// Stops the modules, lets running handlers finish, then flushes and
  /// closes the transport; requests still waiting fail.
  void stop(std::chrono::milliseconds flushTimeout);

  /// Hands a message to a local actor as if envelope.sender had sent it,
  /// in ORD-1 order by envelope.seq. The outcome of a kRequest goes to
  /// `complete` (on a pool thread) instead of back to the sender: this is
  /// how a cast hop delivers to its member actor.
  void deliverLocal(wire::Envelope envelope, wire::Bytes payload, detail::Completion complete);
  /// Answers a kRequest that a raw agent took, from any thread, later.
  void reply(const wire::Envelope& request, std::string type, wire::Payload payload);
  void replyFailure(const wire::Envelope& request, std::exception_ptr error);
  /// Who sends from this thread now: the running actor, else {rank, 0}.
  ActorId currentSender() const;
  /// ORD-1 positions of the next messages from sender to actor destLocal of
  /// each rank; a cast reserves them and carries them to its members (for
  /// many ranks at once the counters are kept as one vector by rank). Waits
  /// first until every member's window has room for `payloadBytes` (FLO-1):
  /// the slowest member paces the sender.
  std::vector<std::uint64_t> reserveSeqs(const ActorId& sender, std::uint64_t destLocal,
                                         const std::vector<std::size_t>& ranks,
                                         std::size_t payloadBytes);

  /// FLO-1: throws MessageTooLarge when `payloadBytes` to rank `to` would be
  /// over CROWN_MAX_FRAME_BYTES. Layers that number messages themselves
  /// (casts) call it first, so a refused message leaves no ORD-1 gap.
  void checkSendable(Rank to, std::size_t payloadBytes) const;

  // Untyped layer under request()/send(). Messages to actors are numbered
  // for ORD-1; messages to raw agents are not. A payload's segments go to
  // the socket where they lie (wire/payload.h). A request over the frame
  // limit fails its completion with MessageTooLarge, a one-way message
  // throws it; neither is numbered.
  std::uint64_t requestRaw(const ActorId& dest, std::string type, wire::Payload payload,
                           detail::Completion complete);
  void sendRaw(const ActorId& dest, std::string type, wire::Payload payload);
  void cancelRequest(std::uint64_t requestId);

 private:
  bool removeLocal(std::uint64_t local, const detail::RemoteFailure* death,
                   bool onlyStarting = false);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crown
