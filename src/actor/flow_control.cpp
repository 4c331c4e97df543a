#include "actor/flow_control.h"

#include <algorithm>
#include <optional>

#include "crown/common/blocking.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown::detail {
namespace {
// A sender that waits this long is told why, once per wait and then again
// every period: a receiver stuck in a handler, or two actors flooding
// each other, waits for ever, and the log should say so.
constexpr auto kWarnAfter = std::chrono::seconds(10);
}  // namespace

FlowLimits FlowLimits::fromEnv() {
  FlowLimits limits;
  limits.bytes = static_cast<std::size_t>(env::integer(
      "CROWN_MAILBOX_LIMIT", static_cast<std::int64_t>(limits.bytes), 1 << 10, std::int64_t{1} << 46));
  limits.messages = static_cast<std::size_t>(env::integer(
      "CROWN_MAILBOX_LIMIT_MESSAGES", static_cast<std::int64_t>(limits.messages), 4, 1 << 30));
  return limits;
}

std::size_t FlowControl::PairHash::operator()(const PairKey& key) const {
  std::uint64_t h = key.sender.local * 0x9E3779B97F4A7C15ull ^ key.sender.rank;
  h = (h ^ key.dest.local) * 0x9E3779B97F4A7C15ull ^ key.dest.rank;
  return std::hash<std::uint64_t>()(h);
}

FlowControl::FlowControl(FlowLimits limits, SendCredit sendCredit, AskCredit askCredit,
                         std::function<bool(Rank)> alive)
    : limits_(limits),
      creditMessages_(std::max<std::size_t>(1, limits.messages / 4)),
      creditBytes_(std::max<std::size_t>(1, limits.bytes / 4)),
      sendCredit_(std::move(sendCredit)),
      askCredit_(std::move(askCredit)),
      alive_(std::move(alive)) {}

bool FlowControl::full(const Window& window, std::size_t bytes) const {
  std::uint64_t inFlight = window.inFlight();
  if (inFlight == 0) return false;
  return inFlight >= limits_.messages || window.bytes + bytes > limits_.bytes;
}

void FlowControl::waitForRoom(const wire::ActorId& sender, const wire::ActorId& dest,
                              std::size_t bytes) {
  std::unique_lock lock(mutex_);
  auto it = windows_.find({sender, dest});
  if (it == windows_.end() || !full(it->second, bytes)) return;  // the common case
  BlockingScope blocking;  // the pool gives the links to another thread meanwhile
  ++waiters_;
  auto since = std::chrono::steady_clock::now();
  auto warnAt = since + kWarnAfter;
  std::uint64_t askedAt = 0;  // the handledThrough when credit was last asked for
  for (bool first = true;; first = false) {
    it = windows_.find({sender, dest});
    if (it == windows_.end() || !full(it->second, bytes)) break;
    // Asked at first, and again after each credit that did not free enough.
    bool ask = first || it->second.handledThrough != askedAt;
    askedAt = it->second.handledThrough;
    lock.unlock();
    if (ask) askCredit_({sender, dest});
    bool lost = !alive_(dest.rank);
    lock.lock();
    if (lost) break;  // the send fails as usual
    // A credit may have come while the lock was free (a local receiver's
    // comes at once): it notified nobody, so look before waiting for one.
    it = windows_.find({sender, dest});
    if (it == windows_.end() || !full(it->second, bytes)) break;
    if (it->second.handledThrough != askedAt) continue;  // not enough: ask again now
    auto now = std::chrono::steady_clock::now();
    roomFreed_.wait_until(lock, std::min(warnAt, now + std::chrono::seconds(1)));
    if (std::chrono::steady_clock::now() < warnAt) continue;
    warnAt += kWarnAfter;
    it = windows_.find({sender, dest});
    if (it == windows_.end()) continue;
    log::get().warn(
        "{} has waited {} s to send to {}: {} messages ({} bytes) sent to it are not handled "
        "yet (CROWN_MAILBOX_LIMIT_MESSAGES={}, CROWN_MAILBOX_LIMIT={})",
        wire::toString(sender),
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - since)
            .count(),
        wire::toString(dest), it->second.inFlight(), it->second.bytes, limits_.messages,
        limits_.bytes);
  }
  --waiters_;
}

void FlowControl::sent(const wire::ActorId& sender, const wire::ActorId& dest, std::uint64_t seq,
                       std::size_t bytes) {
  std::lock_guard lock(mutex_);
  // Before the message is routed, so its credit always finds it here.
  auto [it, created] = windows_.try_emplace({sender, dest});
  Window& window = it->second;
  // A window is dropped once everything sent through it was handled
  // (credited), so a new one starts with all before seq handled: counting
  // from 0 again would take every message ever sent to dest for in flight.
  if (created) window.handledThrough = seq - 1;
  window.lastSent = std::max(window.lastSent, seq);
  window.bytes += bytes;
}

void FlowControl::credited(const Credit& credit) {
  std::lock_guard lock(mutex_);
  auto it = windows_.find({credit.sender, credit.dest});
  if (it == windows_.end()) return;
  Window& window = it->second;
  window.handledThrough = std::max(window.handledThrough, credit.handledThrough);
  window.bytes -= std::min<std::size_t>(window.bytes, credit.bytes);
  if (window.inFlight() == 0) windows_.erase(it);  // nothing in flight: nothing to keep
  if (waiters_ > 0) roomFreed_.notify_all();
}

void FlowControl::handled(const wire::ActorId& sender, const wire::ActorId& dest,
                          std::uint64_t seq, std::size_t bytes) {
  std::optional<Credit> credit;
  {
    std::lock_guard lock(mutex_);
    Handled& counts = handled_[{sender, dest}];
    counts.through = std::max(counts.through, seq);
    counts.bytesSinceCredit += bytes;
    if (counts.owed || counts.through - counts.credited >= creditMessages_ ||
        counts.bytesSinceCredit >= creditBytes_) {
      credit = take(counts, sender, dest);
    }
  }
  if (credit) sendCredit_(*credit);
}

void FlowControl::requested(const CreditRequest& request) {
  std::optional<Credit> credit;
  {
    std::lock_guard lock(mutex_);
    Handled& counts = handled_[{request.sender, request.dest}];
    counts.owed = true;
    if (counts.through > counts.credited) credit = take(counts, request.sender, request.dest);
  }
  if (credit) sendCredit_(*credit);
}

Credit FlowControl::take(Handled& counts, const wire::ActorId& sender, const wire::ActorId& dest) {
  Credit credit{sender, dest, counts.through, counts.bytesSinceCredit};
  counts.credited = counts.through;
  counts.bytesSinceCredit = 0;
  counts.owed = false;
  return credit;
}

void FlowControl::peerLost(Rank rank) {
  std::lock_guard lock(mutex_);
  std::erase_if(windows_, [rank](const auto& entry) { return entry.first.dest.rank == rank; });
  std::erase_if(handled_, [rank](const auto& entry) { return entry.first.sender.rank == rank; });
  if (waiters_ > 0) roomFreed_.notify_all();
}

void FlowControl::forgetDestination(std::uint64_t destLocal, const std::vector<std::size_t>* ranks) {
  std::lock_guard lock(mutex_);
  std::erase_if(windows_, [&](const auto& entry) {
    const wire::ActorId& dest = entry.first.dest;
    return dest.local == destLocal &&
           (ranks == nullptr || std::find(ranks->begin(), ranks->end(), dest.rank) != ranks->end());
  });
  if (waiters_ > 0) roomFreed_.notify_all();
}

void FlowControl::forgetActor(const wire::ActorId& id) {
  std::lock_guard lock(mutex_);
  auto involves = [&id](const auto& entry) {
    return entry.first.sender == id || entry.first.dest == id;
  };
  std::erase_if(windows_, involves);
  std::erase_if(handled_, involves);
  if (waiters_ > 0) roomFreed_.notify_all();
}

void FlowControl::release(const wire::ActorId& dest) {
  std::vector<Credit> credits;
  {
    std::lock_guard lock(mutex_);
    for (auto it = handled_.begin(); it != handled_.end();) {
      if (it->first.dest == dest) {
        if (it->second.through > it->second.credited)
          credits.push_back(take(it->second, it->first.sender, dest));
        it = handled_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const Credit& credit : credits) sendCredit_(credit);
}

std::size_t FlowControl::entries() {
  std::lock_guard lock(mutex_);
  return windows_.size() + handled_.size();
}

}  // namespace crown::detail
