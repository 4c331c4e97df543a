// Proc: the per-process runtime. It hosts this rank's actors (mailboxes
// drained on the IoPool that also runs the links, so a request is handled on
// the thread that read it), routes messages (in-process when the
// destination is local, else over the Transport), and tracks the requests
// waiting for replies. Thread-safe: any thread may send or request.
//
// Every Proc also hosts the proc agent (local id 1), which spawns actors by
// registered type, stops them, and takes the controller's Shutdown.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "crown/actor/actor.h"
#include "crown/actor/future.h"
#include "crown/transport/transport.h"

namespace crown {

namespace detail {
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
/// Local ids below this are the system agents' (the proc agent, the mesh
/// layer's agents); actors spawned one by one get ids from here up.
constexpr std::uint64_t kFirstActorLocalId = 16;
/// Set in the local id of a mesh actor: one id, chosen by whoever spawned
/// the mesh, on every rank of it, so a cast names its destination once.
constexpr std::uint64_t kMeshLocalBit = std::uint64_t{1} << 63;

class Proc {
 public:
  struct Options {
    Rank rank = 0;
    Rank size = 1;
    /// Host name of every rank; shared, since the simulated procs of one
    /// process would otherwise hold V copies of V names each. Null: unknown.
    std::shared_ptr<const std::vector<std::string>> hosts;
    /// Threads for actors and links alike; the transport must run on it too.
    std::shared_ptr<transport::IoPool> pool;
    /// stop() also stops the pool. False when several Procs share it (the
    /// simulated procs of SIM-1): then whoever made the pool stops it, after
    /// every Proc's stop() and before any Proc is destroyed.
    bool stopsPool = true;
    /// Hosts the system agents (the mesh layer's, say) before the transport
    /// starts, so that no message can arrive ahead of them.
    std::function<void(Proc&)> installAgents;
  };

  /// A system agent that takes its messages, envelope and all, on the
  /// delivering thread (no mailbox, no ORD-1 buffering): for routing agents
  /// that forward and answer later. Must not block.
  using RawHandler = std::function<void(wire::Envelope&&, wire::Bytes&&)>;

  /// Starts serving: the transport is started with `peers` (every rank's endpoint).
  Proc(Options options, std::unique_ptr<transport::Transport> transport,
       std::vector<transport::Endpoint> peers);
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  /// The Proc whose actor this thread is running, else the process's first
  /// Proc; throws crown::Error before bootstrap.
  static Proc& current();

  Rank rank() const;
  Rank size() const;
  /// The host name of rank ("" when unknown).
  const std::string& host(Rank rank) const;
  bool alive(Rank rank) const;

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

  /// Hosts `actor` on this rank under `name`.
  ActorId spawnLocal(std::unique_ptr<Actor> actor, std::string name);
  /// Hosts `actor` under a chosen local id (a mesh actor's). Throws
  /// ConfigError when the id is taken.
  ActorId spawnLocalAt(std::uint64_t local, std::unique_ptr<Actor> actor, std::string name);
  /// Only from Options::installAgents: messages to `local` go to `handler`.
  void setRawAgent(std::uint64_t local, RawHandler handler);
  /// Stops a local actor after the message it is handling; later messages fail with ActorStopped.
  void stopLocal(std::uint64_t local);

  /// Called (on a pool thread) when a peer is lost, after its requests have failed.
  void setPeerLostHandler(std::function<void(Rank, const std::string&)> handler);

  /// Marks this process as shutting down with `code` (the first call wins)
  /// and wakes waitForShutdown(). Links lost after this are expected.
  /// `ranksLost`: the controller saw a rank die that this process may not have.
  void requestShutdown(int code, bool ranksLost = false);
  /// True when a rank was lost before shutdown began, here or (as the
  /// controller said) elsewhere.
  bool ranksLost() const;
  /// Blocks until requestShutdown; returns its code.
  int waitForShutdown();
  /// Lets running handlers finish, then flushes and closes the transport.
  void stop(std::chrono::milliseconds flushTimeout);

  /// Hands a message to a local actor as if envelope.sender had sent it,
  /// in ORD-1 order by envelope.seq. The outcome of a kRequest goes to
  /// `complete` (on a pool thread) instead of back to the sender: this is
  /// how a cast hop delivers to its member actor.
  void deliverLocal(wire::Envelope envelope, wire::Bytes payload, detail::Completion complete);
  /// Answers a kRequest that a raw agent took, from any thread, later.
  void reply(const wire::Envelope& request, std::string type, wire::Bytes payload);
  void replyFailure(const wire::Envelope& request, std::exception_ptr error);
  /// Who sends from this thread now: the running actor, else {rank, 0}.
  ActorId currentSender() const;
  /// ORD-1 positions of the next messages from sender to actor destLocal of
  /// each rank; a cast reserves them and carries them to its members.
  std::vector<std::uint64_t> reserveSeqs(const ActorId& sender, std::uint64_t destLocal,
                                         const std::vector<std::size_t>& ranks);

  // Untyped layer under request()/send(). Messages to actors are numbered
  // for ORD-1; messages to raw agents are not.
  std::uint64_t requestRaw(const ActorId& dest, std::string type, wire::Bytes payload,
                           detail::Completion complete);
  void sendRaw(const ActorId& dest, std::string type, wire::Bytes payload);
  void cancelRequest(std::uint64_t requestId);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crown
