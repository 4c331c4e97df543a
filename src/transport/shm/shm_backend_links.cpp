// ShmBackend's links (shm_backend_impl.h): heartbeats, connecting to a
// peer, accepting and serving a peer's link, a refusal, and losing a peer.
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "crown/common/log.h"
#include "transport/last_words.h"
#include "transport/shm/link_setup.h"
#include "transport/shm/record.h"
#include "transport/shm/shm_backend_impl.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {

void ShmBackend::scheduleTick() {
  auto due = Clock::now() + options_.heartbeatInterval;
  pool_->after(options_.heartbeatInterval, [this, ticks = ticks_, due] {
    std::lock_guard lock(ticks->mutex);
    if (ticks->stopped) return;
    tick(due);
    scheduleTick();
  });
}

// Beats on every link and looks for silent peers. A tick this late means
// this process was stopped or starved: the silence was its own, so what
// it heard counts as heard now.
void ShmBackend::tick(Clock::time_point due) {
  bool suspended = suspension_.ticked(due);
  std::vector<std::pair<Rank, std::chrono::milliseconds>> silent;
  {
    std::lock_guard lock(mutex_);  // the sockets stay open meanwhile
    std::vector<Beat> links;
    for (auto& [rank, out] : outs_) {
      if (out->socket >= 0 && !lost_.count(rank)) links.push_back({rank, out->socket, &out->heard});
    }
    for (auto& in : ins_) {
      if (in->up && !lost_.count(in->peer)) links.push_back({in->peer, in->socket, &in->heard});
    }
    silent = beat(links, suspended, options_.heartbeatInterval * options_.heartbeatMisses);
  }
  for (auto [peer, silence] : silent) {
    markLost(peer, LinkError{Kind::kTimeout,
                             "no sign of life for " + std::to_string(silence.count()) +
                                 " ms (CROWN_HEARTBEAT_INTERVAL_MS x CROWN_HEARTBEAT_MISSES)"});
  }
}

bool ShmBackend::readsFrom(Rank peer) {
  std::lock_guard lock(mutex_);
  return std::any_of(ins_.begin(), ins_.end(),
                     [peer](auto& in) { return in->peer == peer && in->up; });
}

std::shared_ptr<OutLink> ShmBackend::outTo(Rank to) {
  std::lock_guard lock(mutex_);
  auto& out = outs_[to];
  if (!out) out = std::make_shared<Out>();
  return out;
}

std::optional<LinkError> ShmBackend::lostError(Rank peer) {
  std::lock_guard lock(mutex_);
  auto it = lost_.find(peer);
  if (it == lost_.end()) return std::nullopt;
  return it->second;
}

// The peer is lost: told once, its outbound ring closed (a writer waiting
// on it wakes). Not while this backend stops: then links closing are ours.
void ShmBackend::markLost(Rank peer, const LinkError& error) {
  std::shared_ptr<Out> out;
  std::string words;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || lost_.count(peer)) return;
    lost_.emplace(peer, error);
    if (auto it = lastWords_.find(peer); it != lastWords_.end()) words = it->second;
    auto it = outs_.find(peer);
    if (it != outs_.end()) out = it->second;
    // A silent peer that wakes finds its links shut, as over TCP: it takes
    // this rank for lost in turn instead of writing into a dead ring.
    for (auto& in : ins_) {
      if (in->peer == peer && in->up) ::shutdown(in->socket, SHUT_RDWR);
    }
  }
  // Not out->mutex: a sender may hold it, blocked on the very ring.
  if (Ring* ring = out ? out->open.load() : nullptr) ring->close();
  // How the peer went, as the Asio links say it (bootstrap/departure.h).
  LinkError told = lossReason(error, words, suspension_.note());
  pool_->post([this, peer, told] { callbacks_.onPeerLost(peer, told); });
}

// The outbound link to `to`: connect, authenticate, pass a new ring.
// Called under out.mutex; nullopt when the link is up.
std::optional<LinkError> ShmBackend::connect(Rank to, OutLink& out) {
  std::string peer;
  {
    std::lock_guard lock(mutex_);
    if (to < peers_.size()) peer = peers_[to];
  }
  auto newline = peer.find('\n');
  if (newline == std::string::npos) {
    return LinkError{Kind::kRefused,
                     "rank " + std::to_string(to) + " has no shared-memory address"};
  }
  auto opened = openLink(peer.substr(0, newline), to, kRingBytes, options_);
  if (auto* error = std::get_if<LinkError>(&opened)) return *error;
  auto& link = std::get<OpenedLink>(opened);
  out.ring.emplace(std::move(link.ring));
  out.ring->setSpinLimit(ringSpin_);
  out.open.store(&*out.ring);
  out.heard = ticksNow();
  out.socket = link.socket;
  // Where the peer writes to this rank too, its reader tells a hang-up,
  // once it has read the ring to the end: the peer's last words may be in it.
  out.watcher = std::thread([this, to, &out] {
    auto news = out.watch(wake_[0]);
    if (!news) return;
    if (news->refusal) return refusedBy(to, out, *news->refusal);
    if (!readsFrom(to)) markLost(to, closedByPeer());
  });
  return std::nullopt;
}

void ShmBackend::accept() {
  for (;;) {
    pollfd fds[2] = {{listenFd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto in = std::make_shared<In>();
    in->socket = fd;
    // The handshake is bounded by the auth timeout; the reader follows it.
    // Each turn holds the link (a reader left in a handler past stop() too);
    // the turns, held by the link, hold it only so.
    auto body = [this, weak = std::weak_ptr<In>(in)] {
      auto link = weak.lock();
      return !link || serve(*link);
    };
    in->turns = ReaderTurns::make(std::move(body), [this] { relief_.busy(); });
    relief_.watch(in->turns);
    std::lock_guard lock(mutex_);
    ins_.push_back(in);
    in->turns->run();
  }
}

// A turn at reading `in` (reader_turns.h); the first one authenticates it.
// True once the link has ended, false when this thread was relieved.
bool ShmBackend::serve(InLink& in) {
  if (!in.ring) {
    auto link = acceptLink(in.socket, options_);
    if (!link) return true;
    in.peer = link->peer;
    in.lender = peerProcess(in.socket);
    in.ring.emplace(std::move(link->ring));
    in.ring->setSpinLimit(ringSpin_);
    in.heard = ticksNow();
    in.up = true;
  }
  auto slice = kReadSlice;
  if (options_.heartbeatInterval.count() > 0) slice = std::min(slice, options_.heartbeatInterval);
  InLink::Sink sink{
      callbacks_.onMessage, [this](Rank peer, std::uint64_t id) { answered(peer, id); },
      [this](Rank peer, std::string words) { noteLastWords(peer, std::move(words)); }};
  auto end = in.read(slice, options_.limits, sink, *pool_);
  if (end == InLink::End::kRelieved) return false;
  if (end == InLink::End::kPeerGone) markLost(in.peer, closedByPeer());
  return true;
}

// The peer refused a frame of this link and closed it, as an Asio link's
// peer does (SEC-1): the link goes, the requests written on it fail
// (DLV-1: their answers would have come back on it), nobody is lost, and
// the next frame to the peer opens a new link.
void ShmBackend::refusedBy(Rank to, OutLink& out, const std::string& why) {
  LinkError error{
      Kind::kBadFrame,
      "rank " + std::to_string(to) + " refused a frame from this rank and closed the link: " + why};
  {
    std::lock_guard lock(mutex_);
    if (auto it = outs_.find(to); it != outs_.end() && it->second.get() == &out) {
      retired_.push_back(std::move(it->second));  // its watcher is joined at stop
      outs_.erase(it);
    }
  }
  for (std::uint64_t id : out.refuse(error)) {
    handBack(to, OutMessage{{wire::MessageKind::kRequest, {options_.rank, 0}, {to, 0}, id, ""}, {}},
             error);
  }
}

void ShmBackend::answered(Rank peer, std::uint64_t id) {
  std::shared_ptr<Out> out;
  {
    std::lock_guard lock(mutex_);
    auto it = outs_.find(peer);
    if (it == outs_.end()) return;
    out = it->second;
  }
  out->settled(id);
}

void ShmBackend::noteLastWords(Rank peer, std::string words) {
  if (words.size() > kMaxLastWords) words.resize(kMaxLastWords);
  std::lock_guard lock(mutex_);
  lastWords_[peer] = std::move(words);
}

}  // namespace crown::transport::shm
