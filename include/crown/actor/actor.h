// crown::Actor: a unit of state with typed message handlers. A Proc runs
// each actor on its executor, one message at a time, each sender's in send order (ORD-1);
// different actors of one process run at the same time once one of them
// takes long (transport/io_pool.h). A handler may block (on a call to
// another actor, say): the pool adds a thread rather than deadlock.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "crown/actor/future.h"
#include "crown/wire/envelope.h"
#include "crown/wire/serialize.h"

namespace crown {

using wire::ActorId;

class Proc;

namespace detail {
/// A handler's outcome on the wire: the reply's type name and payload.
struct HandlerResult {
  std::string type;
  wire::Payload payload;
};
/// Takes the message's payload, which a raw handler may move from.
using Handler = std::function<HandlerResult(wire::Bytes&)>;
struct ActorAccess;
/// The type name of an actor's first turn (Actor::onStart), which its Proc
/// puts in the mailbox as it hosts the actor; nothing else sends it.
inline constexpr const char* kStartTurnType = "crown::StartTurn";
}  // namespace detail

class Actor {
 public:
  Actor() = default;
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  /// This actor's address; set before any handler runs (not in the constructor).
  const ActorId& id() const { return id_; }
  const std::string& name() const { return name_; }
  Rank rank() const { return id_.rank; }

  /// The actor whose handler this thread is running, or nullptr.
  static const Actor* current();

 protected:
  /// The actor dies of `cause` (design.md's failure model: a one-way
  /// message's handler threw, or a handler threw ActorFatal): called once,
  /// in its turn (on the thread that ran that handler, before any other
  /// message), just before the Proc removes it. A subclass releases what it
  /// owns here (PyActor: the meshes its Python actor spawned, __cleanup__).
  /// It must not throw; what it returns (a cleanup that failed too) is
  /// added to the cause that its owner and callers hear.
  virtual std::string dying(const std::string& /*cause*/) noexcept { return {}; }

  /// Registers the handler of message type Msg: `fn(const Msg&)` returns the
  /// reply (any serializable type) or nothing. An exception thrown by `fn`
  /// fails that request only (a one-way message's kills the actor); the
  /// caller gets crown::RemoteError.
  template <class Msg, class Fn>
  void handle(Fn fn) {
    handlers_[wire::messageName<Msg>()] = [fn = std::move(fn)](const wire::Bytes& in) mutable {
      Msg message = wire::fromBytes<Msg>(in);
      // Handed over as an rvalue: a handler taking Msg&& may keep its parts.
      using R = std::decay_t<std::invoke_result_t<Fn&, Msg&&>>;
      if constexpr (std::is_void_v<R>) {
        fn(std::move(message));
        return detail::HandlerResult{wire::messageName<detail::Unit>(), {}};
      } else {
        return detail::HandlerResult{wire::messageName<R>(), wire::toBytes(fn(std::move(message)))};
      }
    };
  }

  /// Registers a handler of message type name `type` that takes the payload
  /// as it arrived (no decoding, and it may keep the bytes) and answers with
  /// a reply type name and payload of its own: for front ends with their own
  /// encoding (Python's pickles).
  void handleRaw(const std::string& type, detail::Handler handler) {
    handlers_[type] = std::move(handler);
  }

  /// Registers what runs in this actor's first turn, before any message
  /// reaches it: the rest of its construction (a Python actor's __init__).
  /// Hosting the actor returns at once, so a constructor that blocks holds
  /// up this actor only (its messages wait behind it), not its spawner or
  /// the proc's other spawns. What `start` throws kills the actor, as a
  /// failed one-way message does, and its owner hears.
  void onStart(std::function<void()> start) {
    handlers_[detail::kStartTurnType] = [start = std::move(start)](wire::Bytes&) {
      start();
      return detail::HandlerResult{wire::messageName<detail::Unit>(), {}};
    };
  }

 private:
  friend struct detail::ActorAccess;
  std::unordered_map<std::string, detail::Handler> handlers_;
  ActorId id_;
  std::string name_;
};

/// The user actor this thread acts for: the innermost ActingAs on this
/// thread, else the user actor whose handler runs here (not a system
/// agent's), else nullopt (the controller's main, a thread crown does not
/// know). The supervision layer records it as the owner of every mesh
/// spawned from this thread.
std::optional<ActorId> actingActor();

/// For its scope, this thread acts for `actor` (actingActor()): the mesh
/// agent while a member's constructor runs, and a front end's threads that
/// run an actor's code outside its handlers (Python's actor loop threads,
/// threads an actor starts). Nestable; a handler run on this thread meanwhile
/// acts for its own actor. Thread-local: enter and leave on one thread.
class ActingAs {
 public:
  explicit ActingAs(const ActorId& actor);
  ~ActingAs();
  ActingAs(const ActingAs&) = delete;
  ActingAs& operator=(const ActingAs&) = delete;

 private:
  std::optional<ActorId> outer_;
};

}  // namespace crown
