// The shared-memory backend (shm_backend.h). Threads: one accepts links
// (and runs their handshakes, link_setup.h, each bounded by the auth
// timeout); each inbound link has a reader, which sleeps in its ring when
// idle; each outbound link has a watcher, asleep in poll() on its socket
// until the peer's heartbeat bytes come or it goes (links.h). Frames are written by the sender's
// own thread, under the link's mutex, and delivered by the link's reader, so frames to one peer
// keep their order (ORD-1's transport half). onMessage runs on the reader
// (the router hands handlers to the pool); the failure callbacks run on
// the pool, never on the sender's thread.
//
// Heartbeats: every interval a pool task (tick) writes one byte to each
// link's socket, both ways, and takes for lost a peer heard from on none of
// its links (a ring record or a socket byte) for interval x misses: a
// stopped or hung process keeps its sockets open. Sent by the pool, as the
// Asio links' are, so a process whose pool is stuck falls silent too.
#include "transport/shm/shm_backend.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "crown/common/log.h"
#include "transport/last_words.h"
#include "transport/shm/link_setup.h"
#include "transport/shm/links.h"
#include "transport/shm/liveness.h"
#include "transport/shm/record.h"
#include "transport/shm/ring.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = LinkError::Kind;

constexpr std::size_t kRingBytes = 1 << 20;
// A reader looks at its socket (a closed end, heartbeat bytes) this often,
// and at least once a heartbeat interval.
constexpr std::chrono::milliseconds kReadSlice{100};
constexpr std::chrono::seconds kWriteBound{60};  // a ring that stays full this long: lost

Clock::time_point fromTicks(std::int64_t ticks) {
  return Clock::time_point(Clock::duration(ticks));
}

class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(const AsioOptions& options) : options_(options) {
    std::random_device random;
    name_ = "crown-shm-" + std::to_string(::getpid()) + "-" + std::to_string(random());
    listenFd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t size = 0;
    sockaddr_un address = abstractAddress(name_, size);
    if (listenFd_ < 0 || ::bind(listenFd_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        ::listen(listenFd_, 64) != 0 || ::pipe2(wake_, O_CLOEXEC) != 0) {
      std::string why = std::strerror(errno);
      if (listenFd_ >= 0) ::close(listenFd_);
      throw BootstrapError("the shared-memory backend cannot listen on @" + name_ + ": " + why);
    }
    pool_ = options.pool;
    if (!pool_) {
      pool_ = std::make_shared<IoPool>();
      pool_->start();
      ownsPool_ = true;
    }
  }

  ~ShmBackend() override {
    stop(std::chrono::milliseconds(0));
    for (int fd : {listenFd_, wake_[0], wake_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  std::string name() const override { return "shm"; }
  std::string address() const override { return name_ + "\n" + options_.host; }
  bool reaches(const std::string& address) const override {
    auto newline = address.find('\n');
    return newline != std::string::npos && address.substr(newline + 1) == options_.host;
  }
  std::string describe(const std::string& address) const override {
    return "@" + address.substr(0, address.find('\n')) + " (shared memory)";
  }

  void start(std::vector<std::string> peers, TransportCallbacks callbacks) override {
    {
      std::lock_guard lock(mutex_);
      peers_ = std::move(peers);
      callbacks_ = std::move(callbacks);
      acceptor_ = std::thread([this] { accept(); });
    }
    if (options_.heartbeatInterval.count() > 0) {
      suspension_.started();
      scheduleTick();
    }
  }

  std::optional<Clock::time_point> lastHeard(Rank peer) const override {
    std::lock_guard lock(mutex_);
    std::int64_t latest = 0;
    for (const auto& in : ins_) {
      if (in->peer == peer && in->up) latest = std::max(latest, in->heard.load());
    }
    if (auto it = outs_.find(peer); it != outs_.end())
      latest = std::max(latest, it->second->heard.load());
    if (latest == 0 || lost_.count(peer)) return std::nullopt;
    return fromTicks(latest);
  }

  // A replacement in a lost rank's slot: a new link to it on the next frame.
  void admit(Rank rank, const std::string& address) override {
    std::lock_guard lock(mutex_);
    if (rank >= peers_.size()) peers_.resize(rank + 1);
    peers_[rank] = address;
    lost_.erase(rank);
    lastWords_.erase(rank);
    if (auto it = outs_.find(rank); it != outs_.end()) {
      retired_.push_back(std::move(it->second));  // its watcher is joined at stop
      outs_.erase(it);
    }
  }

  void send(Rank to, OutMessage message) override {
    if (to >= options_.size) {
      throw ConfigError("rank " + std::to_string(to) + " is outside this job of " +
                        std::to_string(options_.size) + " ranks");
    }
    if (!options_.limits.allows(message.payload.size())) {
      LinkError tooLarge{Kind::kBadFrame, options_.limits.refusal(message.payload.size())};
      return handBack(to, std::move(message), tooLarge);
    }
    std::shared_ptr<Out> out = outTo(to);
    std::lock_guard lock(out->mutex);
    if (auto lost = lostError(to)) return handBack(to, std::move(message), *lost);
    if (!out->ring) {
      if (auto error = connect(to, *out)) {
        markLost(to, *error);
        return handBack(to, std::move(message), *error);
      }
    }
    bool request = message.envelope.kind == wire::MessageKind::kRequest;
    std::uint64_t id = message.envelope.requestId;
    if (request) out->expect(id);
    Ring::Result written = writeFrame(*out->ring, message, Clock::now() + kWriteBound);
    if (written == Ring::Result::kDone) return;
    if (request) out->settled(id);
    if (auto refused = out->refusal()) {
      return handBack(to, std::move(message), *refused);  // closed by a refusal, nobody lost
    }
    LinkError error = written == Ring::Result::kTimedOut
                          ? LinkError{Kind::kTimeout, "the peer's shared-memory ring stayed full"}
                          : LinkError{Kind::kClosed, "the peer closed its shared-memory link"};
    markLost(to, error);
    handBack(to, std::move(message), lostError(to).value_or(error));
  }

  // Into every ring this rank writes, each bounded by `bound` together: a
  // sender stuck on a full ring holds its link, which then stays silent.
  void depart(const std::string& lastWords, std::chrono::milliseconds bound) override {
    auto deadline = Clock::now() + bound;
    std::vector<std::pair<Rank, std::shared_ptr<Out>>> outs;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      outs.assign(outs_.begin(), outs_.end());
    }
    for (auto& [rank, out] : outs) {
      std::unique_lock lock(out->mutex, std::defer_lock);
      while (!lock.try_lock() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!lock.owns_lock() || !out->ring) continue;
      OutMessage notice{{wire::MessageKind::kNotice,
                         {options_.rank, 0},
                         {rank, 0},
                         0,
                         std::string(wire::kNoticeDeparting)},
                        lastWords};
      std::string head;
      out->ring->write(recordParts(notice, head), deadline);
    }
  }

  void stop(std::chrono::milliseconds) override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    {
      std::lock_guard lock(ticks_->mutex);  // a tick that runs ends first; none runs after
      ticks_->stopped = true;
    }
    // What was written is in the rings already: the peers read it before
    // they see the rings closed.
    char byte = 0;
    [[maybe_unused]] ssize_t n = ::write(wake_[1], &byte, 1);
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::shared_ptr<Out>> outs;
    std::vector<std::shared_ptr<In>> ins;
    {
      std::lock_guard lock(mutex_);
      for (auto& [rank, out] : outs_) outs.push_back(out);
      outs.insert(outs.end(), retired_.begin(), retired_.end());
      ins = ins_;
    }
    for (auto& out : outs) {  // not under out->mutex: a sender may hold it, blocked on the ring
      if (Ring* ring = out->open.load()) ring->close();
      if (out->socket >= 0) ::shutdown(out->socket, SHUT_RDWR);
    }
    // A reader sees its own socket shut within a read slice, and ends.
    for (auto& in : ins) ::shutdown(in->socket, SHUT_RDWR);
    for (auto& out : outs) {
      if (out->watcher.joinable()) out->watcher.join();
      if (out->socket >= 0) ::close(out->socket);
    }
    for (auto& in : ins) {
      if (in->reader.joinable()) in->reader.join();
      ::close(in->socket);
    }
    if (ownsPool_) pool_->stop();
  }

 private:
  using Out = OutLink;
  using In = InLink;
  // Ticks are pool tasks that may outlive the backend: they hold this and
  // run only while it says so (stop() sets it under the mutex).
  struct Ticks {
    std::mutex mutex;
    bool stopped = false;
  };

  void scheduleTick() {
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
  void tick(Clock::time_point due) {
    bool suspended = suspension_.ticked(due);
    std::vector<std::pair<Rank, std::chrono::milliseconds>> silent;
    {
      std::lock_guard lock(mutex_);  // the sockets stay open meanwhile
      std::vector<Beat> links;
      for (auto& [rank, out] : outs_) {
        if (out->socket >= 0 && !lost_.count(rank))
          links.push_back({rank, out->socket, &out->heard});
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

  bool readsFrom(Rank peer) {
    std::lock_guard lock(mutex_);
    return std::any_of(ins_.begin(), ins_.end(),
                       [peer](auto& in) { return in->peer == peer && in->up; });
  }

  std::shared_ptr<Out> outTo(Rank to) {
    std::lock_guard lock(mutex_);
    auto& out = outs_[to];
    if (!out) out = std::make_shared<Out>();
    return out;
  }

  std::optional<LinkError> lostError(Rank peer) {
    std::lock_guard lock(mutex_);
    auto it = lost_.find(peer);
    if (it == lost_.end()) return std::nullopt;
    return it->second;
  }

  // The peer is lost: told once, its outbound ring closed (a writer waiting
  // on it wakes). Not while this backend stops: then links closing are ours.
  void markLost(Rank peer, const LinkError& error) {
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

  void handBack(Rank to, OutMessage message, LinkError error) {
    auto shared = std::make_shared<OutMessage>(std::move(message));
    pool_->post(
        [this, to, shared, error] { callbacks_.onSendFailed(to, std::move(*shared), error); });
  }

  // The outbound link to `to`: connect, authenticate, pass a new ring.
  // Called under out.mutex; nullopt when the link is up.
  std::optional<LinkError> connect(Rank to, Out& out) {
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

  void accept() {
    for (;;) {
      pollfd fds[2] = {{listenFd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      auto in = std::make_shared<In>();
      in->socket = fd;
      // The handshake is bounded by the auth timeout; the reader follows it.
      in->reader = std::thread([this, in] { serve(*in); });
      std::lock_guard lock(mutex_);
      ins_.push_back(in);
    }
  }

  void serve(In& in) {
    auto link = acceptLink(in.socket, options_);
    if (!link) return;
    in.peer = link->peer;
    in.lender = peerProcess(in.socket);
    in.ring.emplace(std::move(link->ring));
    in.heard = ticksNow();
    in.up = true;
    auto slice = kReadSlice;
    if (options_.heartbeatInterval.count() > 0) slice = std::min(slice, options_.heartbeatInterval);
    InLink::Sink sink{
        callbacks_.onMessage, [this](Rank peer, std::uint64_t id) { answered(peer, id); },
        [this](Rank peer, std::string words) { noteLastWords(peer, std::move(words)); }};
    if (in.read(slice, options_.limits, sink) == InLink::End::kPeerGone)
      markLost(in.peer, closedByPeer());
  }

  // The peer refused a frame of this link and closed it, as an Asio link's
  // peer does (SEC-1): the link goes, the requests written on it fail
  // (DLV-1: their answers would have come back on it), nobody is lost, and
  // the next frame to the peer opens a new link.
  void refusedBy(Rank to, Out& out, const std::string& why) {
    LinkError error{Kind::kBadFrame,
                    "rank " + std::to_string(to) +
                        " refused a frame from this rank and closed the link: " + why};
    {
      std::lock_guard lock(mutex_);
      if (auto it = outs_.find(to); it != outs_.end() && it->second.get() == &out) {
        retired_.push_back(std::move(it->second));  // its watcher is joined at stop
        outs_.erase(it);
      }
    }
    for (std::uint64_t id : out.refuse(error)) {
      handBack(to,
               OutMessage{{wire::MessageKind::kRequest, {options_.rank, 0}, {to, 0}, id, ""}, {}},
               error);
    }
  }

  void answered(Rank peer, std::uint64_t id) {
    std::shared_ptr<Out> out;
    {
      std::lock_guard lock(mutex_);
      auto it = outs_.find(peer);
      if (it == outs_.end()) return;
      out = it->second;
    }
    out->settled(id);
  }

  static LinkError closedByPeer() {
    return {Kind::kClosed, "the peer's process closed its shared-memory link"};
  }

  void noteLastWords(Rank peer, std::string words) {
    if (words.size() > kMaxLastWords) words.resize(kMaxLastWords);
    std::lock_guard lock(mutex_);
    lastWords_[peer] = std::move(words);
  }

  AsioOptions options_;
  std::string name_;
  int listenFd_ = -1;
  int wake_[2] = {-1, -1};
  std::shared_ptr<IoPool> pool_;
  bool ownsPool_ = false;
  mutable std::mutex mutex_;
  bool stopping_ = false;
  std::shared_ptr<Ticks> ticks_ = std::make_shared<Ticks>();
  SuspensionClock suspension_{options_.heartbeatInterval, options_.heartbeatMisses};
  std::vector<std::string> peers_;
  TransportCallbacks callbacks_;
  std::map<Rank, std::shared_ptr<Out>> outs_;
  std::vector<std::shared_ptr<Out>> retired_;  // links to ranks replaced since
  std::vector<std::shared_ptr<In>> ins_;
  std::map<Rank, LinkError> lost_;
  std::map<Rank, std::string> lastWords_;  // from the peers' departing notices
  std::thread acceptor_;
};

}  // namespace

std::unique_ptr<Backend> makeShmBackend(const AsioOptions& options) {
  return std::make_unique<ShmBackend>(options);
}

}  // namespace crown::transport::shm
