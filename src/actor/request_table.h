// RequestTable: the requests of one Proc that wait for their replies, and
// the peers known to be lost. DLV-1 is kept here: a request ends with its
// reply, or fails when its peer is lost (markLost), when it is cancelled
// (a caller's timeout), or at shutdown (takeAll). Ports (crown/actor/port.h)
// are entries too: they end with their owner (takePortsOf), at shutdown
// (takePorts), and hear of a watched rank lost (portsWatching), under the
// same lock as the lost marks (addPort). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "crown/actor/proc.h"

namespace crown::detail {

class PortState;  // port_hub.h

class RequestTable {
 public:
  /// `slots` ranks, of which [0, present) and `self` are present from the
  /// start; the others are vacant until they join (admit).
  RequestTable(Rank slots, Rank present, Rank self);

  std::uint64_t nextId() { return nextId_.fetch_add(1); }
  /// Registers request `id` to `dest`; false (nothing registered) when
  /// `dest` is already known to be lost or has not joined: the caller fails it.
  bool add(std::uint64_t id, Rank dest, Completion complete);
  /// Ends request `id` with the reply or failure frame that answered it; a
  /// reply to a request no longer waiting (cancelled) is dropped.
  void answer(wire::Envelope&& envelope, wire::Bytes&& payload);
  /// Ends request `id` with `error`, if it still waits.
  void fail(std::uint64_t id, const std::exception_ptr& error);
  /// Forgets request `id`: its late reply is dropped.
  void cancel(std::uint64_t id);

  /// Present: joined and not lost.
  bool alive(Rank rank) const;
  /// Requests waiting for their answer.
  std::size_t pending() const;
  /// Joined once (alive or lost since), as opposed to a vacant slot.
  bool exists(Rank rank) const;
  /// A vacant slot's rank joined (a replacement); false when it was not vacant.
  bool admit(Rank rank);
  /// Marks `peer` lost and hands back the completions of its requests.
  std::vector<Completion> markLost(Rank peer);
  /// Hands back every waiting request's completion (shutdown).
  std::vector<Completion> takeAll();

  /// Registers a port under its id; hands back the watched ranks already
  /// lost or vacant (the caller reports them to the port).
  std::vector<Rank> addPort(std::shared_ptr<PortState> port, const std::vector<Rank>& watched);
  void removePort(std::uint64_t id);
  /// A port frame: to its open port, else to the orphan hook (FLO-1 credit).
  /// A kPortWatch makes the port watch (or stop watching) the sender's rank.
  void toPort(wire::Envelope&& envelope, wire::Bytes&& payload);
  void setPortOrphan(std::function<void(const wire::Envelope&, std::size_t)> orphan) {
    orphan_ = std::move(orphan);
  }
  /// Open ports watching `peer` (call after markLost(peer)).
  std::vector<std::shared_ptr<PortState>> portsWatching(Rank peer) const;
  /// Takes the ports that actor `ownerLocal` owns (it stopped or died).
  std::vector<std::shared_ptr<PortState>> takePortsOf(std::uint64_t ownerLocal);
  /// Takes every open port (shutdown).
  std::vector<std::shared_ptr<PortState>> takePorts();
  std::size_t ports() const;

 private:
  struct Pending {
    Rank dest = 0;
    Completion complete;
  };
  Completion take(std::uint64_t id);

  enum class State : std::uint8_t { kPresent, kLost, kVacant };

  // Guards pending_ and state_ together, so a request is either registered
  // before its peer is marked lost (and failed by markLost) or sees the mark.
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::unordered_map<std::uint64_t, std::shared_ptr<PortState>> ports_;
  std::function<void(const wire::Envelope&, std::size_t)> orphan_;  // set before start
  std::vector<State> state_;  // by rank
  std::atomic<std::uint64_t> nextId_{1};
};

}  // namespace crown::detail
