#include "actor/request_table.h"

#include <algorithm>

#include "actor/port_hub.h"
#include "crown/actor/failure.h"

namespace crown::detail {

RequestTable::RequestTable(Rank slots, Rank present, Rank self)
    : state_(slots, State::kVacant) {
  for (Rank r = 0; r < std::min(present, slots); ++r) state_[r] = State::kPresent;
  if (self < slots) state_[self] = State::kPresent;
}

bool RequestTable::add(std::uint64_t id, Rank dest, Completion complete) {
  std::lock_guard lock(mutex_);
  if (dest < state_.size() && state_[dest] != State::kPresent) return false;
  pending_.emplace(id, Pending{dest, std::move(complete)});
  return true;
}

Completion RequestTable::take(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return nullptr;
  Completion complete = std::move(it->second.complete);
  pending_.erase(it);
  return complete;
}

void RequestTable::answer(wire::Envelope&& envelope, wire::Bytes&& payload) {
  Completion complete = take(envelope.requestId);
  if (!complete) return;  // cancelled (timed out): the late reply is dropped
  if (envelope.kind == wire::MessageKind::kReply) {
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

void RequestTable::fail(std::uint64_t id, const std::exception_ptr& error) {
  if (Completion complete = take(id)) complete(Outcome{error, {}, {}});
}

void RequestTable::cancel(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  pending_.erase(id);
}

bool RequestTable::alive(Rank rank) const {
  std::lock_guard lock(mutex_);
  return rank < state_.size() && state_[rank] == State::kPresent;
}

std::size_t RequestTable::pending() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

bool RequestTable::exists(Rank rank) const {
  std::lock_guard lock(mutex_);
  return rank < state_.size() && state_[rank] != State::kVacant;
}

bool RequestTable::admit(Rank rank) {
  std::lock_guard lock(mutex_);
  if (rank >= state_.size() || state_[rank] != State::kVacant) return false;
  state_[rank] = State::kPresent;
  return true;
}

std::vector<Completion> RequestTable::markLost(Rank peer) {
  std::vector<Completion> failed;
  std::lock_guard lock(mutex_);
  if (peer < state_.size()) state_[peer] = State::kLost;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.dest == peer) {
      failed.push_back(std::move(it->second.complete));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return failed;
}

std::vector<Completion> RequestTable::takeAll() {
  std::vector<Completion> all;
  std::lock_guard lock(mutex_);
  for (auto& [id, pending] : pending_) all.push_back(std::move(pending.complete));
  pending_.clear();
  return all;
}

std::vector<Rank> RequestTable::addPort(std::shared_ptr<PortState> port,
                                        const std::vector<Rank>& watched) {
  std::vector<Rank> absent;
  std::lock_guard lock(mutex_);
  for (Rank rank : watched)
    if (rank >= state_.size() || state_[rank] != State::kPresent) absent.push_back(rank);
  std::uint64_t id = port->ref().id;
  ports_.emplace(id, std::move(port));
  return absent;
}

void RequestTable::removePort(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  ports_.erase(id);
}

void RequestTable::toPort(wire::Envelope&& envelope, wire::Bytes&& payload) {
  std::shared_ptr<PortState> port;
  bool holderAbsent = false;
  {
    std::lock_guard lock(mutex_);
    if (auto it = ports_.find(envelope.requestId); it != ports_.end()) port = it->second;
    if (envelope.kind == wire::MessageKind::kPortWatch) {
      if (!port || port->ref().owner != envelope.dest) return;  // ended: nothing to watch
      Rank holder = envelope.sender.rank;
      bool watch = !payload.empty() && payload[0] != 0;
      holderAbsent = holder >= state_.size() || state_[holder] != State::kPresent;
      // Under this lock, as the lost marks: a loss marked later finds it (portsWatching).
      if (!holderAbsent) port->watchHolder(holder, watch);
      if (!holderAbsent || !watch) return;
    }
  }
  if (holderAbsent) return port->holderAbsent(envelope.sender.rank);  // outside: it may end
  // Outside the table's lock: a port takes its own (lock order: table, port).
  if (port && port->ref().owner == envelope.dest) {
    port->deliver(std::move(envelope), std::move(payload));
  } else if (orphan_) {
    orphan_(envelope, payload.size());
  }
}

std::vector<std::shared_ptr<PortState>> RequestTable::portsWatching(Rank peer) const {
  std::vector<std::shared_ptr<PortState>> found;
  std::lock_guard lock(mutex_);
  for (const auto& [id, port] : ports_)
    if (port->watches(peer)) found.push_back(port);
  return found;
}

std::vector<std::shared_ptr<PortState>> RequestTable::takePortsOf(std::uint64_t ownerLocal) {
  std::vector<std::shared_ptr<PortState>> taken;
  std::lock_guard lock(mutex_);
  for (auto it = ports_.begin(); it != ports_.end();) {
    if (it->second->ref().owner.local == ownerLocal) {
      taken.push_back(std::move(it->second));
      it = ports_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<std::shared_ptr<PortState>> RequestTable::takePorts() {
  std::vector<std::shared_ptr<PortState>> taken;
  std::lock_guard lock(mutex_);
  for (auto& [id, port] : ports_) taken.push_back(std::move(port));
  ports_.clear();
  return taken;
}

std::size_t RequestTable::ports() const {
  std::lock_guard lock(mutex_);
  return ports_.size();
}

}  // namespace crown::detail
