// The shared-memory backend (shm_backend.h). Threads: one accepts links
// (and runs their handshakes, each bounded by the auth timeout); each
// inbound link has a reader, which sleeps in its ring when idle; each
// outbound link has a watcher, asleep in poll() on its socket until the
// peer goes. Frames are written by the sender's own thread, under the
// link's mutex, and delivered by the link's reader, so frames to one peer
// keep their order (ORD-1's transport half). onMessage runs on the reader
// (the router hands handlers to the pool); the failure callbacks run on
// the pool, never on the sender's thread.
#include "transport/shm/shm_backend.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "crown/common/log.h"
#include "crown/transport/handshake.h"
#include "transport/shm/ring.h"

namespace crown::transport::shm {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = LinkError::Kind;

constexpr std::size_t kRingBytes = 1 << 20;
constexpr std::chrono::milliseconds kReadSlice{100};  // a reader looks at its socket this often
constexpr std::chrono::seconds kWriteBound{60};        // a ring that stays full this long: lost

sockaddr_un abstractAddress(const std::string& name, socklen_t& size) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), std::min(name.size(), sizeof address.sun_path - 2));
  size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                std::min(name.size(), sizeof address.sun_path - 2));
  return address;
}

void setTimeouts(int fd, std::chrono::milliseconds bound) {
  timeval t{static_cast<time_t>(bound.count() / 1000), static_cast<suseconds_t>(bound.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
}

bool sendAll(int fd, const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, at, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, std::size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, at, size, 0);
    if (n <= 0) return false;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Whether the peer's end of `fd` is gone (its process ended or it stopped).
bool hungUp(int fd) {
  pollfd one{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&one, 1, 0) > 0 && (one.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
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
    std::lock_guard lock(mutex_);
    peers_ = std::move(peers);
    callbacks_ = std::move(callbacks);
    acceptor_ = std::thread([this] { accept(); });
  }

  // A replacement in a lost rank's slot: a new link to it on the next frame.
  void admit(Rank rank, const std::string& address) override {
    std::lock_guard lock(mutex_);
    if (rank >= peers_.size()) peers_.resize(rank + 1);
    peers_[rank] = address;
    lost_.erase(rank);
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
    std::string head(4 + wire::encodedSize(message.envelope), '\0');
    auto envelopeBytes = static_cast<std::uint32_t>(head.size() - 4);
    std::memcpy(head.data(), &envelopeBytes, 4);
    wire::encodeEnvelope(message.envelope, reinterpret_cast<std::byte*>(head.data() + 4));
    std::vector<std::span<const std::byte>> parts;
    parts.push_back(std::as_bytes(std::span(head)));
    parts.push_back(std::as_bytes(std::span(message.payload.head())));
    for (const auto& segment : message.payload.segments()) {
      parts.push_back(std::as_bytes(std::span(segment.data, segment.size)));
    }
    Ring::Result written = out->ring->write(parts, Clock::now() + kWriteBound);
    if (written != Ring::Result::kDone) {
      LinkError error = written == Ring::Result::kTimedOut
                            ? LinkError{Kind::kTimeout, "the peer's shared-memory ring stayed full"}
                            : LinkError{Kind::kClosed, "the peer closed its shared-memory link"};
      markLost(to, error);
      handBack(to, std::move(message), lostError(to).value_or(error));
    }
  }

  void stop(std::chrono::milliseconds) override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
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
    for (auto& out : outs) {
      std::lock_guard lock(out->mutex);
      if (out->ring) out->ring->close();
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
  struct Out {
    std::mutex mutex;  // one writer at a time: frames to the peer keep their order
    int socket = -1;
    std::optional<Ring> ring;
    std::atomic<Ring*> open{nullptr};  // ring, once made: markLost closes it without the mutex
    std::thread watcher;
  };
  struct In {
    Rank peer = 0;
    int socket = -1;
    std::optional<Ring> ring;
    std::thread reader;
  };

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
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || lost_.count(peer)) return;
      lost_.emplace(peer, error);
      auto it = outs_.find(peer);
      if (it != outs_.end()) out = it->second;
    }
    // Not out->mutex: a sender may hold it, blocked on the very ring.
    if (Ring* ring = out ? out->open.load() : nullptr) ring->close();
    pool_->post([this, peer, error] { callbacks_.onPeerLost(peer, error); });
  }

  void handBack(Rank to, OutMessage message, LinkError error) {
    auto shared = std::make_shared<OutMessage>(std::move(message));
    pool_->post([this, to, shared, error] { callbacks_.onSendFailed(to, std::move(*shared), error); });
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
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t size = 0;
    sockaddr_un address = abstractAddress(peer.substr(0, newline), size);
    if (fd < 0 || newline == std::string::npos ||
        ::connect(fd, reinterpret_cast<sockaddr*>(&address), size) != 0) {
      if (fd >= 0) ::close(fd);
      return LinkError{Kind::kRefused, "nobody listens at " + describe(peer)};
    }
    setTimeouts(fd, options_.authTimeout);
    try {
      ClientHandshake handshake(options_.secret, options_.security, options_.rank, to);
      std::array<std::uint8_t, kHelloBytes> hello{};
      std::array<std::uint8_t, kServerAuthBytes> proof{};
      if (!readAll(fd, hello.data(), hello.size())) throw ProtocolError("no hello came");
      auto auth = handshake.onHello(hello);
      if (!sendAll(fd, auth.data(), auth.size()) || !readAll(fd, proof.data(), proof.size())) {
        throw ProtocolError("the peer refused this rank's proof of the job secret");
      }
      handshake.onServerAuth(proof);
      Ring ring = Ring::create(kRingBytes);
      sendFd(fd, ring.fd());
      out.ring.emplace(std::move(ring));
      out.open.store(&*out.ring);
    } catch (const std::exception& e) {
      ::close(fd);
      return LinkError{Kind::kAuthFailed, std::string("shared-memory link to rank ") +
                                              std::to_string(to) + ": " + e.what()};
    }
    setTimeouts(fd, std::chrono::milliseconds(0));
    out.socket = fd;
    out.watcher = std::thread([this, to, fd] { watch(to, fd); });
    return std::nullopt;
  }

  // Asleep until the peer's end of the socket goes (or this backend stops).
  void watch(Rank peer, int fd) {
    pollfd fds[2] = {{fd, POLLRDHUP, 0}, {wake_[0], POLLIN, 0}};
    while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
    }
    if (fds[0].revents != 0) markLost(peer, LinkError{Kind::kClosed, "the peer's process closed its shared-memory link"});
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
    int fd = in.socket;
    setTimeouts(fd, options_.authTimeout);
    try {
      ServerHandshake handshake(options_.secret, options_.security, options_.rank, options_.size);
      auto hello = handshake.hello();
      std::array<std::uint8_t, kClientAuthBytes> auth{};
      if (!sendAll(fd, hello.data(), hello.size()) || !readAll(fd, auth.data(), auth.size())) return;
      LinkSession session;
      auto proof = handshake.onClientAuth(auth, session);
      if (!sendAll(fd, proof.data(), proof.size())) return;
      in.peer = session.peer;
      in.ring.emplace(Ring::attach(receiveFd(fd)));
    } catch (const std::exception& e) {
      log::get().warn("shared-memory backend: refused a link: {}", e.what());
      ::shutdown(fd, SHUT_RDWR);
      return;
    }
    setTimeouts(fd, std::chrono::milliseconds(0));
    read(in);
  }

  void read(In& in) {
    std::string record;
    for (;;) {
      Ring::Result got = in.ring->read(record, Clock::now() + kReadSlice);
      if (got == Ring::Result::kDone) {
        deliver(in.peer, std::move(record));
        record = {};
        continue;
      }
      if (got == Ring::Result::kTimedOut && !hungUp(in.socket)) continue;
      // Closed, or the peer's process is gone: what it wrote was read first.
      markLost(in.peer, LinkError{Kind::kClosed, "the peer's process closed its shared-memory link"});
      return;
    }
  }

  void deliver(Rank from, std::string record) {
    std::uint32_t envelopeBytes = 0;
    if (record.size() < 4) return badFrame(from, "a record shorter than its header");
    std::memcpy(&envelopeBytes, record.data(), 4);
    if (envelopeBytes > options_.limits.maxEnvelopeBytes || 4 + std::size_t{envelopeBytes} > record.size()) {
      return badFrame(from, "an envelope of " + std::to_string(envelopeBytes) + " bytes");
    }
    std::uint64_t payloadBytes = record.size() - 4 - envelopeBytes;
    if (!options_.limits.allows(payloadBytes)) return badFrame(from, options_.limits.refusal(payloadBytes));
    try {
      wire::Envelope envelope =
          wire::decodeEnvelope(reinterpret_cast<const std::byte*>(record.data() + 4), envelopeBytes);
      // On the reader's own thread, so frames from one peer keep their
      // order (as a link's strand does); what it starts goes to the pool.
      callbacks_.onMessage(from, std::move(envelope), record.substr(4 + envelopeBytes));
    } catch (const std::exception& e) {
      badFrame(from, e.what());
    }
  }

  void badFrame(Rank from, const std::string& why) {
    log::get().warn("shared-memory backend: dropped a frame from rank {}: {}", from, why);
  }

  AsioOptions options_;
  std::string name_;
  int listenFd_ = -1;
  int wake_[2] = {-1, -1};
  std::shared_ptr<IoPool> pool_;
  bool ownsPool_ = false;
  std::mutex mutex_;
  bool stopping_ = false;
  std::vector<std::string> peers_;
  TransportCallbacks callbacks_;
  std::map<Rank, std::shared_ptr<Out>> outs_;
  std::vector<std::shared_ptr<Out>> retired_;  // links to ranks replaced since
  std::vector<std::shared_ptr<In>> ins_;
  std::map<Rank, LinkError> lost_;
  std::thread acceptor_;
};

}  // namespace

std::unique_ptr<Backend> makeShmBackend(const AsioOptions& options) {
  return std::make_unique<ShmBackend>(options);
}

}  // namespace crown::transport::shm
