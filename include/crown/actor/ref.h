// ActorRef<A>: a typed, serializable address of an actor. It travels inside
// messages, so actors can call each other. Sends go through the Proc of the
// calling process.
#pragma once

#include "crown/actor/proc.h"

namespace crown {

template <class A = Actor>
class ActorRef {
 public:
  ActorRef() = default;
  explicit ActorRef(ActorId id) : id_(id) {}

  const ActorId& id() const { return id_; }
  Rank rank() const { return id_.rank; }

  /// Request/reply: R is the handler's return type (void for none).
  template <class R, class Msg>
  Future<R> call(const Msg& message) const {
    return Proc::current().request<R>(id_, message);
  }

  /// One-way message.
  template <class Msg>
  void send(const Msg& message) const {
    Proc::current().send(id_, message);
  }

  friend bool operator==(const ActorRef&, const ActorRef&) = default;

  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& id_;
  }

 private:
  ActorId id_;
};

}  // namespace crown
