// Boost.Asio transport over TCP between hosts and abstract Unix domain
// sockets within one (same frames, same handshake: an abstract socket has no
// file permissions, so SEC-1 matters there too). The links run on the
// IoPool, each on its own strand. Senders on other threads write straight to
// the socket when its queue is empty (no thread hop on the latency path) and
// otherwise append to the queue, which the link's strand drains with one
// gathered write per batch (coalescing small frames).
//
// Links are one-directional for frames: rank a sends to rank b only over the
// connection a opened to b, so one stream carries everything a sends to b,
// in order (ORD-1). Accepted connections only receive.
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange

#include <arpa/inet.h>

#include <sys/socket.h>
#include <sys/uio.h>
#include <boost/asio.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "crown/common/log.h"
#include "crown/transport/transport.h"
#include "transport/asio/frame_reader.h"
#include "transport/io_pool_impl.h"

namespace crown::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Socket = asio::generic::stream_protocol::socket;  // TCP or Unix
// Every link runs on its own strand: the pool has several threads, and one
// link's socket, queue and timers are touched by one of them at a time.
using Strand = asio::strand<asio::io_context::executor_type>;
using namespace std::chrono_literals;

constexpr std::size_t kMaxBatchFrames = 256;
constexpr std::size_t kMaxBatchBytes = 4 << 20;
// Frames sent closer together than this on one link count as a stream.
constexpr auto kStreamingGap = std::chrono::microseconds(10);

struct QueuedFrame {
  std::string head;  // frame header + envelope
  OutMessage message;
  std::size_t written = 0;  // bytes of head+payload already on the wire

  std::size_t size() const { return head.size() + message.payload.size(); }
};

class AsioTransport;

bool isTcp(Socket& socket) {
  int family = socket.local_endpoint().protocol().family();
  return family == AF_INET || family == AF_INET6;
}

// "address:port" of a TCP peer, for logs; "local socket" otherwise.
std::string describePeer(Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(socket.native_handle(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return "unknown peer";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return "local socket";
}

// One connection with one peer. The client side connects and proves it
// holds the job secret; the server side accepts and checks (SEC-1). Both
// sides then read frames. A rank writes to a peer over exactly one link, its
// send link for that peer (ORD-1): the connection it opened, or the one the
// peer opened first if that came earlier, so that a request and its reply
// share one connection in both directions.
class Link : public std::enable_shared_from_this<Link> {
 public:
  /// A client link to `peer`; connects on the first send.
  Link(AsioTransport& transport, Rank peer);
  /// A server link: `socket` was accepted on `strand`.
  Link(AsioTransport& transport, Strand strand, Socket socket);

  void startServer();
  void send(OutMessage message);  // any thread
  /// Nothing queued or being written (for stop()).
  bool idle();
  void close();  // on the strand
  Strand& strand() { return strand_; }

 private:
  enum class State { kIdle, kConnecting, kReady, kDead };

  asio::awaitable<void> connectAndAuthenticate();
  asio::awaitable<bool> authenticateClient();  // server side
  asio::awaitable<void> readFrames();
  /// Sends heartbeats while the link is quiet and fails it when the peer is.
  void startHeartbeats();  // on the strand
  void scheduleHeartbeat();
  void startWrite();                                    // on the strand
  void fail(const std::string& reason, bool peerLost);  // any thread
  bool tryWriteDirect(QueuedFrame& frame);              // with mutex_ held

  AsioTransport& transport_;
  Rank peer_ = 0;  // a server link learns it in the handshake
  Strand strand_;
  Socket socket_;
  std::string remote_;
  std::mutex mutex_;
  State state_ = State::kIdle;
  bool writing_ = false;
  std::deque<QueuedFrame> queue_;
  std::chrono::steady_clock::time_point lastSend_{};
  std::atomic<std::int64_t> lastHeard_{0};  // steady_clock ticks of the last bytes read
  asio::steady_timer heartbeat_{strand_};
};

class AsioTransport final : public Transport {
 public:
  explicit AsioTransport(const AsioOptions& options);
  ~AsioTransport() override;

  Endpoint localEndpoint() const override { return local_; }
  void start(std::vector<Endpoint> peers, TransportCallbacks callbacks) override;
  void send(Rank to, OutMessage message) override;
  void stop(std::chrono::milliseconds flushTimeout) override;

  // For the links.
  asio::io_context& io() { return pool_->impl().io; }
  const AsioOptions& options() const { return options_; }
  const Endpoint& peer(Rank rank) const { return peers_.at(rank); }
  const TransportCallbacks& callbacks() const { return callbacks_; }
  void reportPeerLost(Rank peer, const std::string& reason);
  /// A server link authenticated as `peer`: it becomes the send link to
  /// that peer unless this rank already has one.
  void offerSendLink(Rank peer, const std::shared_ptr<Link>& link);
  /// The link is closed; `dropSendLink`: it is no longer the send link to its peer.
  void forget(const std::shared_ptr<Link>& link, bool dropSendLink);
  bool stopping() const { return stopping_; }

 private:
  template <class Acceptor>
  asio::awaitable<void> acceptLoop(Acceptor& acceptor);

  AsioOptions options_;
  std::shared_ptr<IoPool> pool_;
  bool ownsPool_ = false;
  Strand acceptStrand_;
  tcp::acceptor acceptor_;
  asio::local::stream_protocol::acceptor localAcceptor_;
  Endpoint local_;
  std::vector<Endpoint> peers_;
  TransportCallbacks callbacks_;
  bool started_ = false;
  std::atomic<bool> stopping_{false};

  std::mutex mutex_;                              // guards sendLinks_, lost_, links_
  std::vector<std::shared_ptr<Link>> sendLinks_;  // by peer rank
  std::vector<bool> lost_;
  std::set<std::shared_ptr<Link>> links_;  // every open link, for stop()
};

// ---------------------------------------------------------------- Link

Link::Link(AsioTransport& transport, Rank peer)
    : transport_(transport),
      peer_(peer),
      strand_(asio::make_strand(transport.io())),
      socket_(strand_) {}

Link::Link(AsioTransport& transport, Strand strand, Socket socket)
    : transport_(transport),
      strand_(std::move(strand)),
      socket_(std::move(socket)),
      remote_(describePeer(socket_)) {
  boost::system::error_code ignored;
  if (isTcp(socket_)) socket_.set_option(tcp::no_delay(true), ignored);
  socket_.non_blocking(true, ignored);
}

void Link::send(OutMessage message) {
  QueuedFrame frame{wire::encodeFrameHead(message.envelope, message.payload.size()),
                    std::move(message)};
  std::unique_lock lock(mutex_);
  switch (state_) {
    case State::kDead: {
      lock.unlock();
      transport_.callbacks().onSendFailed(peer_, std::move(frame.message), "link is down");
      return;
    }
    case State::kIdle:
      state_ = State::kConnecting;
      queue_.push_back(std::move(frame));
      asio::co_spawn(strand_, connectAndAuthenticate(),
                     [self = shared_from_this()](std::exception_ptr error) {
                       if (!error) return;
                       try {
                         std::rethrow_exception(error);
                       } catch (const std::exception& e) {
                         self->fail(e.what(), true);
                       }
                     });
      return;
    case State::kConnecting:
      queue_.push_back(std::move(frame));
      return;
    case State::kReady: {
      // A sender that is streaming gains from batching more than from the
      // direct write: its frames queue up for one gathered write on the
      // strand. A lone frame (request/reply traffic) goes out at once.
      auto now = std::chrono::steady_clock::now();
      bool streaming = now - lastSend_ < kStreamingGap;
      lastSend_ = now;
      if (!streaming && !writing_ && queue_.empty() && tryWriteDirect(frame)) return;
      queue_.push_back(std::move(frame));
      if (!writing_) {
        writing_ = true;
        asio::post(strand_, [self = shared_from_this()] { self->startWrite(); });
      }
      return;
    }
  }
}

// Latency path: one sendmsg from the sender's thread. Safe beside the strand
// because no asynchronous write is in flight (writing_ is false), the kernel
// serialises this write against the pending read, and the socket is closed
// only after the state leaves kReady, which needs mutex_.
bool Link::tryWriteDirect(QueuedFrame& frame) {
  iovec iov[2] = {{frame.head.data(), frame.head.size()},
                  {frame.message.payload.data(), frame.message.payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = frame.message.payload.empty() ? 1 : 2;
  ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    int error = errno;
    asio::post(strand_, [self = shared_from_this(), error] {
      self->fail(std::string("send failed: ") + std::strerror(error), true);
    });
    return false;  // the frame stays queued and is handed back by fail()
  }
  frame.written = static_cast<std::size_t>(n);
  return frame.written == frame.size();
}

void Link::startWrite() {
  std::vector<asio::const_buffer> buffers;
  std::size_t frames = 0;
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kReady) return;
    for (auto& frame : queue_) {
      if (frames == kMaxBatchFrames || (frames > 0 && bytes >= kMaxBatchBytes)) break;
      std::size_t skip = frame.written;
      if (skip < frame.head.size()) {
        buffers.emplace_back(frame.head.data() + skip, frame.head.size() - skip);
        skip = 0;
      } else {
        skip -= frame.head.size();
      }
      if (skip < frame.message.payload.size()) {
        buffers.emplace_back(frame.message.payload.data() + skip,
                             frame.message.payload.size() - skip);
      }
      bytes += frame.size() - frame.written;
      ++frames;
    }
    if (frames == 0) {
      writing_ = false;
      return;
    }
  }
  // Buffers point into queue_ entries: deque::push_back never moves existing
  // elements, and only this completion pops them.
  asio::async_write(socket_, buffers,
                    asio::bind_executor(strand_, [self = shared_from_this(), frames](
                                                     boost::system::error_code ec, std::size_t) {
                      if (ec) {
                        self->fail("write failed: " + ec.message(), true);
                        return;
                      }
                      {
                        std::lock_guard lock(self->mutex_);
                        for (std::size_t i = 0; i < frames && !self->queue_.empty(); ++i) {
                          self->queue_.pop_front();
                        }
                      }
                      self->startWrite();
                    }));
}

// Hands queued frames back and closes the link. `peerLost`: the connection
// itself broke, which is how a dead process shows; a protocol error closes
// only this link (SEC-1), and the next send to that peer opens a new one.
void Link::fail(const std::string& reason, bool peerLost) {
  std::deque<QueuedFrame> lost;
  {
    std::lock_guard lock(mutex_);
    if (state_ == State::kDead) return;
    state_ = State::kDead;
    lost.swap(queue_);
  }
  asio::post(strand_, [self = shared_from_this()] {
    boost::system::error_code ignored;
    self->socket_.close(ignored);
  });
  transport_.forget(shared_from_this(), !peerLost);
  for (auto& frame : lost) {
    transport_.callbacks().onSendFailed(peer_, std::move(frame.message), reason);
  }
  if (peerLost && !transport_.stopping()) transport_.reportPeerLost(peer_, reason);
}

bool Link::idle() {
  std::lock_guard lock(mutex_);
  return state_ == State::kDead || state_ == State::kIdle || (queue_.empty() && !writing_);
}

void Link::close() {
  {
    std::lock_guard lock(mutex_);
    state_ = State::kDead;
  }
  heartbeat_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void Link::startHeartbeats() {
  if (transport_.options().heartbeatInterval.count() == 0) return;
  lastHeard_ = std::chrono::steady_clock::now().time_since_epoch().count();
  scheduleHeartbeat();
}

void Link::scheduleHeartbeat() {
  const auto interval = transport_.options().heartbeatInterval;
  heartbeat_.expires_after(interval);
  heartbeat_.async_wait([self = shared_from_this(), interval](boost::system::error_code ec) {
    if (ec) return;  // cancelled: the link is closing
    auto now = std::chrono::steady_clock::now();
    auto heard = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(self->lastHeard_.load()));
    auto silence = std::chrono::duration_cast<std::chrono::milliseconds>(now - heard);
    if (silence > interval * self->transport_.options().heartbeatMisses) {
      self->fail("no sign of life for " + std::to_string(silence.count()) +
                     " ms (CROWN_HEARTBEAT_INTERVAL_MS x CROWN_HEARTBEAT_MISSES)",
                 true);
      return;
    }
    bool quiet = false;
    {
      std::lock_guard lock(self->mutex_);
      if (self->state_ != State::kReady) return;
      quiet = now - self->lastSend_ >= interval && self->queue_.empty();
    }
    if (quiet) {
      Rank rank = self->transport_.options().rank;
      self->send({{wire::MessageKind::kHeartbeat, {rank, 0}, {self->peer_, 0}, 0, ""}, {}});
    }
    self->scheduleHeartbeat();
  });
}

asio::awaitable<void> Link::connectAndAuthenticate() {
  const auto& options = transport_.options();
  const auto& endpoint = transport_.peer(peer_);
  asio::steady_timer deadline(strand_);
  deadline.expires_after(options.connectTimeout + options.authTimeout);
  bool expired = false;
  deadline.async_wait([this, &expired](boost::system::error_code ec) {
    if (ec) return;
    expired = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
  });
  bool local = !endpoint.local.empty();
  std::string where = local ? "local socket @" + endpoint.local
                            : endpoint.host + ":" + std::to_string(endpoint.port);
  try {
    if (local) {
      asio::local::stream_protocol::endpoint target(std::string(1, '\0') + endpoint.local);
      co_await socket_.async_connect(target, asio::use_awaitable);
    } else {
      tcp::endpoint target(asio::ip::make_address(endpoint.host), endpoint.port);
      co_await socket_.async_connect(target, asio::use_awaitable);
      socket_.set_option(tcp::no_delay(true));
    }
    socket_.non_blocking(true);
    remote_ = where;

    std::array<std::uint8_t, kHelloBytes> hello{};
    co_await asio::async_read(socket_, asio::buffer(hello), asio::use_awaitable);
    auto serverNonce = decodeHello(hello);
    if (!serverNonce) throw ProtocolError("peer did not greet with a crown hello");
    ClientAuth auth{options.rank, randomNonce(), {}};
    auth.proof = clientProof(options.secret, *serverNonce, auth.nonce, options.rank);
    auto clientBytes = encodeClientAuth(auth);
    co_await asio::async_write(socket_, asio::buffer(clientBytes), asio::use_awaitable);
    Mac answer{};
    co_await asio::async_read(socket_, asio::buffer(answer), asio::use_awaitable);
    if (!macEqual(answer, serverProof(options.secret, *serverNonce, auth.nonce, options.rank))) {
      throw ProtocolError("peer failed to prove it knows the job secret");
    }
  } catch (const boost::system::system_error& e) {
    deadline.cancel();
    throw Error(std::string(expired ? "timed out connecting to " : "cannot connect to ") + where +
                (expired ? "" : ": " + e.code().message()));
  } catch (const std::exception& e) {
    deadline.cancel();
    throw Error("handshake with " + where + " failed: " + e.what());
  }
  deadline.cancel();
  bool flush = false;
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kConnecting) co_return;
    state_ = State::kReady;
    flush = writing_ = !queue_.empty();
  }
  if (flush) startWrite();
  startHeartbeats();
  co_await readFrames();
}

void Link::startServer() {
  asio::co_spawn(
      strand_,
      [self = shared_from_this()]() -> asio::awaitable<void> {
        if (co_await self->authenticateClient()) {
          {
            std::lock_guard lock(self->mutex_);
            if (self->state_ == State::kIdle) self->state_ = State::kReady;
          }
          self->transport_.offerSendLink(self->peer_, self);
          self->startHeartbeats();
          co_await self->readFrames();
        }
      },
      [self = shared_from_this()](std::exception_ptr) {
        self->close();
        self->transport_.forget(self, false);
      });
}

// SEC-1: nothing is read as a frame until the peer has proved it holds the
// job secret; a peer that stalls is cut off by the deadline.
asio::awaitable<bool> Link::authenticateClient() {
  const auto& options = transport_.options();
  asio::steady_timer deadline(strand_);
  deadline.expires_after(options.authTimeout);
  deadline.async_wait([this](boost::system::error_code ec) {
    if (!ec) close();
  });
  try {
    Nonce serverNonce = randomNonce();
    auto hello = encodeHello(serverNonce);
    co_await asio::async_write(socket_, asio::buffer(hello), asio::use_awaitable);
    std::array<std::uint8_t, kClientAuthBytes> clientBytes{};
    co_await asio::async_read(socket_, asio::buffer(clientBytes), asio::use_awaitable);
    ClientAuth auth = decodeClientAuth(clientBytes);
    if (auth.rank >= options.size ||
        !macEqual(auth.proof, clientProof(options.secret, serverNonce, auth.nonce, auth.rank))) {
      log::get().warn("rejected connection from {}: authentication failed", remote_);
      co_return false;
    }
    Mac answer = serverProof(options.secret, serverNonce, auth.nonce, auth.rank);
    co_await asio::async_write(socket_, asio::buffer(answer), asio::use_awaitable);
    peer_ = auth.rank;
  } catch (const std::exception& e) {
    log::get().warn("rejected connection from {}: handshake did not complete ({})", remote_,
                    e.what());
    co_return false;
  }
  deadline.cancel();
  co_return true;
}

asio::awaitable<void> Link::readFrames() {
  FrameReader reader(transport_.options().limits);
  try {
    for (;;) {
      auto space = reader.space();
      std::size_t n = co_await socket_.async_read_some(asio::buffer(space.data(), space.size()),
                                                       asio::use_awaitable);
      reader.commit(n);
      lastHeard_ = std::chrono::steady_clock::now().time_since_epoch().count();
      while (auto frame = reader.next()) {
        if (frame->envelope.kind == wire::MessageKind::kHeartbeat) continue;
        transport_.callbacks().onMessage(peer_, std::move(frame->envelope),
                                         std::move(frame->payload));
      }
    }
  } catch (const ProtocolError& e) {
    // SEC-1: a bad frame closes this link and nothing else.
    log::get().error("closing link with rank {} ({}): {}", peer_, remote_, e.what());
    fail(std::string("link closed after a bad frame: ") + e.what(), false);
  } catch (const boost::system::system_error& e) {
    fail("connection lost: " + e.code().message(), true);
  }
}

// ---------------------------------------------------------------- AsioTransport

AsioTransport::AsioTransport(const AsioOptions& options)
    : options_(options),
      pool_(options.pool ? options.pool : std::make_shared<IoPool>()),
      ownsPool_(!options.pool),
      acceptStrand_(asio::make_strand(pool_->impl().io)),
      acceptor_(acceptStrand_),
      localAcceptor_(acceptStrand_) {
  try {
    tcp::endpoint endpoint(asio::ip::make_address(options.bindAddress), 0);
    acceptor_.open(endpoint.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(endpoint);
    acceptor_.listen(asio::socket_base::max_listen_connections);
    local_ = {options.bindAddress, acceptor_.local_endpoint().port(), {}};
  } catch (const boost::system::system_error& e) {
    throw BootstrapError("rank " + std::to_string(options.rank) + " cannot listen on " +
                         options.bindAddress + ": " + e.code().message() +
                         " (choose another address with CROWN_ADDR or CROWN_IFACE)");
  }
  if (options.listenLocal) {
    // Abstract socket names live in the network namespace, not the file
    // system: nothing to clean up, and only this host can connect.
    auto nonce = randomNonce();
    std::string name = "crown-";
    for (int i = 0; i < 8; ++i) name += "0123456789abcdef"[nonce[i] & 15];
    name += "-" + std::to_string(options.rank);
    try {
      asio::local::stream_protocol::endpoint endpoint(std::string(1, '\0') + name);
      localAcceptor_.open(endpoint.protocol());
      localAcceptor_.bind(endpoint);
      localAcceptor_.listen(asio::socket_base::max_listen_connections);
      local_.local = name;
    } catch (const boost::system::system_error& e) {
      log::get().warn("no same-host socket ({}); ranks on this host use TCP", e.code().message());
      boost::system::error_code ignored;
      localAcceptor_.close(ignored);
    }
  }
}

AsioTransport::~AsioTransport() { stop(0ms); }

void AsioTransport::start(std::vector<Endpoint> peers, TransportCallbacks callbacks) {
  CROWN_CHECK(peers.size() == options_.size, "one endpoint per rank is needed");
  peers_ = std::move(peers);
  callbacks_ = std::move(callbacks);
  sendLinks_.resize(options_.size);
  lost_.assign(options_.size, false);
  asio::co_spawn(acceptStrand_, acceptLoop(acceptor_), asio::detached);
  if (localAcceptor_.is_open())
    asio::co_spawn(acceptStrand_, acceptLoop(localAcceptor_), asio::detached);
  started_ = true;
  if (ownsPool_) pool_->start();
}

template <class Acceptor>
asio::awaitable<void> AsioTransport::acceptLoop(Acceptor& acceptor) {
  for (;;) {
    boost::system::error_code ec;
    Strand strand = asio::make_strand(io());
    Socket socket(strand);
    co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      log::get().warn("accept failed: {}", ec.message());
      continue;
    }
    auto link = std::make_shared<Link>(*this, std::move(strand), std::move(socket));
    {
      std::lock_guard lock(mutex_);
      links_.insert(link);
    }
    link->startServer();
  }
}

void AsioTransport::send(Rank to, OutMessage message) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard lock(mutex_);
    if (to >= sendLinks_.size()) {
      throw ConfigError("rank " + std::to_string(to) + " does not exist (size " +
                        std::to_string(sendLinks_.size()) + ")");
    }
    if (!sendLinks_[to]) {
      sendLinks_[to] = std::make_shared<Link>(*this, to);
      links_.insert(sendLinks_[to]);
    }
    link = sendLinks_[to];
  }
  link->send(std::move(message));
}

void AsioTransport::offerSendLink(Rank peer, const std::shared_ptr<Link>& link) {
  std::lock_guard lock(mutex_);
  if (sendLinks_[peer]) return;  // this rank opened its own first: keep using it (ORD-1)
  sendLinks_[peer] = link;  // already ready to write: authenticated server links are
}

void AsioTransport::reportPeerLost(Rank peer, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (peer >= lost_.size() || lost_[peer]) return;
    lost_[peer] = true;
  }
  if (callbacks_.onPeerLost) callbacks_.onPeerLost(peer, reason);
}

void AsioTransport::forget(const std::shared_ptr<Link>& link, bool dropSendLink) {
  std::lock_guard lock(mutex_);
  links_.erase(link);
  // A dead peer's link stays its send link, so later sends fail at once; a
  // link closed for a bad frame goes, so the next send opens a fresh one.
  if (!dropSendLink) return;
  for (auto& sendLink : sendLinks_) {
    if (sendLink == link) sendLink.reset();
  }
}

void AsioTransport::stop(std::chrono::milliseconds flushTimeout) {
  if (stopping_.exchange(true) || !started_) return;
  auto deadline = std::chrono::steady_clock::now() + flushTimeout;
  for (;;) {
    bool idle = true;
    {
      std::lock_guard lock(mutex_);
      for (auto& link : sendLinks_) idle = idle && (!link || link->idle());
    }
    if (idle || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(1ms);
  }
  // Close everything, each on its own strand, and wait (bounded) for that.
  std::vector<std::shared_ptr<Link>> links;
  {
    std::lock_guard lock(mutex_);
    links.assign(links_.begin(), links_.end());
  }
  auto pending = std::make_shared<std::atomic<std::size_t>>(1 + links.size());
  auto allClosed = std::make_shared<std::promise<void>>();
  auto done = allClosed->get_future();
  auto closeOn = [&](Strand& strand, std::function<void()> close) {
    asio::post(strand, [close = std::move(close), pending, allClosed] {
      close();
      if (pending->fetch_sub(1) == 1) allClosed->set_value();
    });
  };
  closeOn(acceptStrand_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    localAcceptor_.close(ignored);
  });
  for (auto& link : links) closeOn(link->strand(), [link] { link->close(); });
  done.wait_for(1s);
  if (ownsPool_) pool_->stop();
}

}  // namespace

std::unique_ptr<Transport> makeAsioTransport(const AsioOptions& options) {
  return std::make_unique<AsioTransport>(options);
}

}  // namespace crown::transport
