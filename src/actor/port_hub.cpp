#include "actor/port_hub.h"

#include <algorithm>

#include "actor/flow_control.h"
#include "actor/request_table.h"
#include "actor/router.h"
#include "crown/actor/failure.h"
#include "crown/common/abortable.h"
#include "crown/common/blocking.h"
#include "crown/common/log.h"
#include "crown/common/spin_wait.h"

namespace crown {
namespace detail {

using wire::MessageKind;

namespace {
wire::ActorId flowDest(const PortRef& ref) { return {ref.owner.rank, kPortFlowBit | ref.id}; }

std::string describe(const PortRef& ref) {
  return "port " + std::to_string(ref.id) + " of " + wire::toString(ref.owner);
}
}  // namespace

std::exception_ptr droppedError(Rank rank, const PortRef& ref) {
  return std::make_exception_ptr(Error("the holder of " + describe(ref) + " on rank " +
                                       std::to_string(rank) + " dropped it without sending"));
}

// ---------------------------------------------------------------- PortState

PortState::PortState(PortRef ref, std::vector<Rank> watched, std::shared_ptr<PortHub> hub)
    : ref_(ref), hub_(std::move(hub)), watched_(std::move(watched)) {
  std::sort(watched_.begin(), watched_.end());
  watched_.erase(std::unique(watched_.begin(), watched_.end()), watched_.end());
  settled_.assign(watched_.size(), false);
  unsettled_ = watched_.size();
  // A per-member port with no member has every item it takes.
  if (ref_.mode == PortMode::kPerMember && watched_.empty()) complete_ = true;
}

bool PortState::watches(Rank rank) {
  if (std::binary_search(watched_.begin(), watched_.end(), rank)) return true;  // fixed: no lock
  std::lock_guard lock(mutex_);
  return std::find(holders_.begin(), holders_.end(), rank) != holders_.end();
}

void PortState::watchHolder(Rank rank, bool watch) {
  std::lock_guard lock(mutex_);
  auto it = std::find(holders_.begin(), holders_.end(), rank);
  if (watch && it == holders_.end() && !closed_ && !complete_) holders_.push_back(rank);
  if (!watch && it != holders_.end()) holders_.erase(it);
}

void PortState::holderAbsent(Rank rank) {
  {
    std::lock_guard lock(mutex_);
    if (std::find(holders_.begin(), holders_.end(), rank) == holders_.end()) holders_.push_back(rank);
  }
  lost(rank, hub_->absentError(rank));
}

bool PortState::settle(Rank from) {
  auto it = std::lower_bound(watched_.begin(), watched_.end(), from);
  if (it == watched_.end() || *it != from) return true;  // not a member: not settled by it
  auto index = static_cast<std::size_t>(it - watched_.begin());
  if (settled_[index]) return false;
  settled_[index] = true;
  --unsettled_;
  return true;
}

void PortState::deliver(wire::Envelope&& envelope, wire::Bytes&& payload) {
  QueuedItem queued;
  queued.item.from = envelope.sender.rank;
  queued.flowSender = envelope.sender;
  queued.seq = envelope.seq;
  queued.bytes = payload.size();
  if (envelope.kind == MessageKind::kPortValue) {
    queued.item.type = std::move(envelope.type);
    queued.item.payload = std::move(payload);
  } else {
    queued.item.dropped = envelope.kind == MessageKind::kPortDrop;
    try {
      queued.item.error = toException(wire::fromBytes<RemoteFailure>(payload));
    } catch (...) {
      queued.item.error = std::current_exception();
    }
  }
  push(std::move(queued));
}

void PortState::push(QueuedItem&& queued) {
  bool taken = false;
  bool completedNow = false;
  {
    std::lock_guard lock(mutex_);
    if (!closed_ && !complete_) {
      switch (ref_.mode) {
        case PortMode::kOnce:
          taken = completedNow = true;
          break;
        case PortMode::kPerMember:
          taken = settle(queued.item.from);  // a member's later items are dropped
          completedNow = taken && unsettled_ == 0;
          break;
        case PortMode::kStream:
          taken = true;
          break;
      }
    }
    if (taken) {
      queue_.push_back(std::move(queued));
      complete_ = complete_ || completedNow;
      ready_.store(true, std::memory_order_release);
    }
  }
  if (taken) {
    cv_.notify_all();
    if (completedNow) hub_->ended(ref_.id, false);
  } else {
    hub_->consumed(ref_.id, queued);  // dropped: FLO-1 frees its room at once
  }
}

void PortState::lost(Rank rank, const std::exception_ptr& error) {
  bool completedNow = false;
  {
    std::lock_guard lock(mutex_);
    if (closed_ || complete_) return;
    auto it = std::lower_bound(watched_.begin(), watched_.end(), rank);
    if (it != watched_.end() && *it == rank) {
      auto index = static_cast<std::size_t>(it - watched_.begin());
      if (settled_[index]) return;  // answered already, or reported lost once
      settled_[index] = true;
      --unsettled_;
    } else {  // a holder's rank: once, while it holds the port
      auto holder = std::find(holders_.begin(), holders_.end(), rank);
      if (holder == holders_.end()) return;
      holders_.erase(holder);
    }
    QueuedItem queued;
    queued.item.from = rank;
    queued.item.error = error;
    queue_.push_back(std::move(queued));
    completedNow = ref_.mode == PortMode::kOnce ||
                   (ref_.mode == PortMode::kPerMember && unsettled_ == 0);
    complete_ = completedNow;
    ready_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (completedNow) hub_->ended(ref_.id, false);
}

void PortState::fail(const std::exception_ptr& error) {
  std::deque<QueuedItem> dropped;
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (complete_) return;  // it had every item: they stay to be taken
    closed_ = true;
    failure_ = error;
    dropped.swap(queue_);
    ready_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  for (const QueuedItem& queued : dropped) hub_->consumed(ref_.id, queued);
  hub_->ended(ref_.id, ref_.mode == PortMode::kStream);
}

void PortState::close() {
  std::vector<QueuedItem> credits;  // what is queued stays to be taken, credited now
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
    for (QueuedItem& queued : queue_) {
      if (queued.seq == 0) continue;
      credits.push_back(QueuedItem{{}, queued.flowSender, queued.seq, queued.bytes});
      queued.seq = 0;
    }
    ready_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  for (const QueuedItem& queued : credits) hub_->consumed(ref_.id, queued);
  hub_->ended(ref_.id, ref_.mode == PortMode::kStream);
}

std::size_t PortState::queued() {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::optional<PortItem> PortState::next(
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  // A pool thread does not spin: it may be the one that would deliver.
  if (blockingHooks() == nullptr) spinUntil([this] { return ready_.load(std::memory_order_acquire); });
  BlockingScope blocking;
  // Within an AbortableScope (the controller program's wait), the end of
  // the job after an unhandled fault fails it (common/abortable.h).
  detail::AbortableWait abortable(mutex_, cv_);  // before the lock: abortable.h's order
  std::unique_lock lock(mutex_);
  auto ready = [&] {
    return failure_ || !queue_.empty() || complete_ || closed_ || abortable.aborted();
  };
  if (!deadline) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_until(lock, *deadline, ready)) {
    throw Timeout("nothing came to " + describe(ref_) + " in time");
  }
  if (failure_) std::rethrow_exception(failure_);
  if (queue_.empty() && !complete_ && !closed_) abortable.rethrow();
  if (queue_.empty()) return std::nullopt;  // ended, and every item was taken
  QueuedItem queued = std::move(queue_.front());
  queue_.pop_front();
  if (queue_.empty() && !complete_ && !closed_) ready_.store(false, std::memory_order_relaxed);
  lock.unlock();
  hub_->consumed(ref_.id, queued);
  return std::move(queued.item);
}

// ----------------------------------------------------------------- PortHold

PortHold::~PortHold() {
  hub_->released(*this, !answered_.load() && ref_.mode != PortMode::kStream);
}

void PortHold::send(MessageKind kind, std::string type, wire::Payload payload) {
  answered_.store(true);
  hub_->send(*this, kind, std::move(type), std::move(payload));
}

void PortHold::sendError(const std::exception_ptr& error) {
  send(MessageKind::kPortError, kRemoteFailureType,
       wire::toBytes(describeFailure(error, hub_->rank())));
}

void PortHold::holderGone(const std::exception_ptr& cause) {
  bool stream = ref_.mode == PortMode::kStream;
  if (answered_.exchange(true) && !stream) return;
  try {
    hub_->send(*this, MessageKind::kPortDrop, kRemoteFailureType,
               wire::toBytes(describeFailure(cause, hub_->rank())));
  } catch (const std::exception& e) {
    log::get().warn("could not tell {} its holder went: {}", describe(ref_), e.what());
  }
}

// ------------------------------------------------------------------ PortHub

std::size_t PortHub::KeyHash::operator()(const Key& key) const {
  std::uint64_t h = key.owner.local * 0x9E3779B97F4A7C15ull ^ key.owner.rank;
  return std::hash<std::uint64_t>()((h ^ key.id) * 0x9E3779B97F4A7C15ull);
}

PortHub::PortHub(Rank rank, RequestTable& table, FlowControl& flow, Router& router,
                 std::function<wire::ActorId()> senderId,
                 std::function<std::exception_ptr(Rank)> absentError)
    : rank_(rank),
      table_(table),
      flow_(flow),
      router_(router),
      senderId_(std::move(senderId)),
      absentError_(std::move(absentError)) {}

PortReceiver PortHub::open(PortMode mode, std::vector<Rank> watched) {
  CROWN_CHECK(attached(), "a port opened on a Proc that is gone");
  // Watching no rank, it learns where its holders are from them (port.h).
  PortRef ref{senderId_(), table_.nextId(), mode, /*announce=*/watched.empty()};
  auto state = std::make_shared<PortState>(ref, watched, shared_from_this());
  for (Rank absent : table_.addPort(state, watched)) state->lost(absent, absentError_(absent));
  return PortReceiver(std::move(state));
}

void PortHub::orphan(const wire::Envelope& envelope, std::size_t bytes) {
  if (envelope.seq == 0 || !attached()) return;
  flow_.handled(envelope.sender, {rank_, kPortFlowBit | envelope.requestId}, envelope.seq, bytes);
}

void PortHub::consumed(std::uint64_t id, const QueuedItem& queued) {
  if (queued.seq == 0 || !attached()) return;
  flow_.handled(queued.flowSender, {rank_, kPortFlowBit | id}, queued.seq, queued.bytes);
}

void PortHub::ended(std::uint64_t id, bool flows) {
  if (!attached()) return;
  table_.removePort(id);
  if (flows) flow_.release({rank_, kPortFlowBit | id});
}

void PortHub::ownerGone(std::uint64_t local, const std::exception_ptr& error) {
  if (!attached()) return;
  for (auto& port : table_.takePortsOf(local)) port->fail(error);
}

void PortHub::peerLost(Rank peer, const std::exception_ptr& error) {
  if (!attached()) return;
  for (auto& port : table_.portsWatching(peer)) port->lost(peer, error);
}

void PortHub::shutdown(const std::exception_ptr& error) {
  if (!attached()) return;
  for (auto& port : table_.takePorts()) port->fail(error);
}

PortHandle PortHub::hold(const PortRef& ref) {
  std::shared_ptr<PortHold> held;
  {
    std::lock_guard lock(holdsMutex_);
    Slot& slot = holds_[Key{ref.owner, ref.id}];
    if (auto kept = slot.hold.lock()) return PortHandle(std::move(kept));
    slot.holder = senderId_().local;
    bool away = ref.owner.rank != rank_;
    PortRef handedOn = ref;
    handedOn.announce = handedOn.announce || away;  // whoever gets it from here announces
    held = std::make_shared<PortHold>(handedOn, ref.announce && away, slot.holder,
                                      kPortFlowBit | nextFlowKey_.fetch_add(1), shared_from_this());
    slot.hold = held;
  }
  // Ahead of any value from this hold, on the same link (ORD-1).
  if (held->announced()) sendWatch(*held, true);
  return PortHandle(std::move(held));
}

void PortHub::sendWatch(PortHold& hold, bool watch) {
  try {
    send(hold, MessageKind::kPortWatch, std::string(), wire::Bytes(1, watch ? '\1' : '\0'));
  } catch (const std::exception& e) {
    log::get().warn("could not tell {} where its holder is: {}", describe(hold.ref()), e.what());
  }
}

void PortHub::send(PortHold& hold, MessageKind kind, std::string type, wire::Payload payload) {
  if (!attached()) return;  // the proc is gone: nobody can receive it
  const PortRef& ref = hold.ref();
  if (router_.tooLarge(ref.owner.rank, payload.size()))
    throw router_.tooLargeError(ref.owner.rank, payload.size());
  wire::Envelope envelope{kind, {rank_, hold.flowKey()}, ref.owner, ref.id, std::move(type)};
  if (kind == MessageKind::kPortValue && ref.mode == PortMode::kStream) {
    // FLO-1: a stream port's values are its receiver's memory. Its owner
    // never waits for room (it would wait on its own next()).
    if (senderId_() != ref.owner) flow_.waitForRoom(envelope.sender, flowDest(ref), payload.size());
    envelope.seq = hold.nextSeq();
    flow_.sent(envelope.sender, flowDest(ref), envelope.seq, payload.size());
  }
  router_.route({std::move(envelope), std::move(payload)});
}

void PortHub::released(PortHold& hold, bool dropNotice) {
  if (!attached()) return;
  {
    std::lock_guard lock(holdsMutex_);
    auto it = holds_.find(Key{hold.ref().owner, hold.ref().id});
    // A new hold of the same port may have taken the slot since this one expired.
    if (it != holds_.end() && it->second.hold.expired()) holds_.erase(it);
  }
  if (hold.ref().mode == PortMode::kStream) flow_.forgetActor({rank_, hold.flowKey()});
  if (dropNotice) {
    try {
      send(hold, MessageKind::kPortDrop, kRemoteFailureType,
           wire::toBytes(describeFailure(droppedError(rank_, hold.ref()), rank_)));
    } catch (const std::exception& e) {
      log::get().warn("could not tell {} its holder dropped it: {}", describe(hold.ref()), e.what());
    }
  }
  if (hold.announced()) sendWatch(hold, false);  // after the drop notice: it is heard first
}

std::vector<std::shared_ptr<PortHold>> PortHub::holdsOf(std::uint64_t local) {
  std::vector<std::shared_ptr<PortHold>> held;
  if (!attached()) return held;
  std::lock_guard lock(holdsMutex_);
  for (auto& [key, slot] : holds_) {
    if (slot.holder != local) continue;
    if (auto hold = slot.hold.lock()) held.push_back(std::move(hold));
  }
  return held;
}

void PortHub::holderGone(const std::vector<std::shared_ptr<PortHold>>& holds,
                         const std::exception_ptr& cause) {
  for (const auto& hold : holds) hold->holderGone(cause);
}

}  // namespace detail

// ------------------------------------------------------- PortReceiver, PortHandle

PortReceiver::PortReceiver(std::shared_ptr<detail::PortState> state) : state_(std::move(state)) {}

PortReceiver& PortReceiver::operator=(PortReceiver&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

PortReceiver::~PortReceiver() { close(); }

const PortRef& PortReceiver::ref() const {
  CROWN_CHECK(state_ != nullptr, "use of an empty crown::PortReceiver");
  return state_->ref();
}

std::optional<PortItem> PortReceiver::next() {
  CROWN_CHECK(state_ != nullptr, "use of an empty crown::PortReceiver");
  return state_->next(std::nullopt);
}

std::optional<PortItem> PortReceiver::next(std::chrono::milliseconds timeout) {
  CROWN_CHECK(state_ != nullptr, "use of an empty crown::PortReceiver");
  return state_->next(std::chrono::steady_clock::now() + timeout);
}

void PortReceiver::close() {
  if (state_) state_->close();
}

std::size_t PortReceiver::queued() const { return state_ ? state_->queued() : 0; }

const PortRef& PortHandle::ref() const {
  CROWN_CHECK(hold_ != nullptr, "use of an empty crown::PortHandle");
  return hold_->ref();
}

void PortHandle::send(std::string type, wire::Payload payload) const {
  CROWN_CHECK(hold_ != nullptr, "use of an empty crown::PortHandle");
  hold_->send(wire::MessageKind::kPortValue, std::move(type), std::move(payload));
}

void PortHandle::sendError(std::exception_ptr error) const {
  CROWN_CHECK(hold_ != nullptr, "use of an empty crown::PortHandle");
  hold_->sendError(error);
}

}  // namespace crown
