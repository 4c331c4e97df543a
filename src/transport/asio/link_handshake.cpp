// Link's handshakes (link.h): the client proves it holds the job secret and
// checks that the server does; the server checks the client (SEC-1).
#include "crown/common/log.h"
#include "transport/asio/link.h"

namespace crown::transport {

using tcp = asio::ip::tcp;
using Kind = LinkError::Kind;

asio::awaitable<void> Link::connectAndAuthenticate() {
  const auto& options = backend_.options();
  asio::steady_timer deadline(strand_);
  deadline.expires_after(options.connectTimeout + options.authTimeout);
  bool expired = false;
  deadline.async_wait([this, &expired](boost::system::error_code ec) {
    if (ec) return;
    expired = true;
    boost::system::error_code ignored;
    socket_.close(ignored);
  });
  std::string where = backend_.describePeer(peer_);
  bool connected = false;
  LinkSession session;
  try {
    std::array<std::uint8_t, kHelloBytes> hello{};
    co_await connectUntilGreeted(hello, expired);
    connected = true;
    remote_ = where;

    ClientHandshake handshake(options.secret, options.security, options.rank, peer_);
    auto clientAuth = handshake.onHello(hello);
    co_await asio::async_write(socket_, asio::buffer(clientAuth), asio::use_awaitable);
    std::array<std::uint8_t, kServerAuthBytes> answer{};
    co_await asio::async_read(socket_, asio::buffer(answer), asio::use_awaitable);
    session = handshake.onServerAuth(answer);
  } catch (const boost::system::system_error& e) {
    deadline.cancel();
    if (isLocalShortage(e.code())) {
      throw LinkFailure({Kind::kLocalResource, "cannot connect to " + where + ": " +
                                                   e.code().message() + " in this process"});
    }
    if (expired) throw LinkFailure({Kind::kTimeout, "timed out connecting to " + where});
    if (!connected) {
      Kind kind = e.code() == asio::error::connection_refused ? Kind::kRefused : Kind::kReset;
      throw LinkFailure({kind, "cannot connect to " + where + ": " + e.code().message()});
    }
    // The server hangs up on a client whose proof fails (SEC-1).
    throw LinkFailure({Kind::kAuthFailed, "handshake with " + where + " failed: " +
                                              e.code().message()});
  } catch (const std::exception& e) {
    deadline.cancel();
    throw LinkFailure({Kind::kAuthFailed, "handshake with " + where + " failed: " + e.what()});
  }
  deadline.cancel();
  bool flush = false;
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kConnecting) co_return;
    beginSession(session);
    state_ = State::kReady;
    flush = writing_ = !queue_.empty();
  }
  if (flush) startWrite();
  startHeartbeats();
  co_await readFrames();
}

// Closes the socket for another attempt after `backoff` (10 ms doubling to
// 500 ms); rethrows `ec` once the deadline has passed.
asio::awaitable<void> Link::retryAfter(std::chrono::milliseconds& backoff,
                                       const boost::system::error_code& ec, const bool& expired) {
  boost::system::error_code ignored;
  socket_.close(ignored);
  asio::steady_timer pause(strand_);
  pause.expires_after(backoff);
  co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  if (expired) throw boost::system::system_error(ec);
  backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
}

// A shortage of descriptors says nothing about the peer (issue 10): wait
// it out, up to the connect deadline, which closes the socket and sets
// `expired`.
asio::awaitable<void> Link::connectPatiently(const bool& expired) {
  static log::RateLimit shortageLog;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    boost::system::error_code ec;
    co_await socket_.async_connect(backend_.target(peer_),
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) co_return;
    if (!isLocalShortage(ec) || expired) throw boost::system::system_error(ec);
    if (auto dropped = shortageLog.admit()) {
      log::get().warn("connecting to rank {}: {}; retrying ({} such lines dropped)", peer_,
                      ec.message(), *dropped);
    }
    co_await retryAfter(backoff, ec, expired);
  }
}

// A peer that closes before its hello is alive but refusing connections for
// now (its share of unauthenticated ones is taken: asio_backend.cpp): try
// again, up to the deadline.
asio::awaitable<void> Link::connectUntilGreeted(std::array<std::uint8_t, kHelloBytes>& hello,
                                                const bool& expired) {
  static log::RateLimit refusedLog;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    co_await connectPatiently(expired);
    tuneSocket(socket_);
    boost::system::error_code ec;
    co_await asio::async_read(socket_, asio::buffer(hello),
                              asio::redirect_error(asio::use_awaitable, ec));
    if (!ec) co_return;
    bool refused = ec == asio::error::eof || ec == asio::error::connection_reset;
    if (!refused || expired) throw boost::system::system_error(ec);
    if (auto dropped = refusedLog.admit()) {
      log::get().warn("rank {} closed a connection before its hello (busy); retrying ({} such "
                      "lines dropped)",
                      peer_, *dropped);
    }
    co_await retryAfter(backoff, ec, expired);
  }
}

void Link::endAuthentication() {
  if (source_.empty()) return;
  backend_.authenticationEnded(source_);
  source_.clear();
}

void Link::startServer() {
  asio::co_spawn(
      strand_,
      [self = shared_from_this()]() -> asio::awaitable<void> {
        bool authenticated = co_await self->authenticateClient();
        self->endAuthentication();
        if (authenticated) {
          {
            std::lock_guard lock(self->mutex_);
            if (self->state_ == State::kIdle) self->state_ = State::kReady;
          }
          self->backend_.offerSendLink(self->peer_, self);
          self->startHeartbeats();
          co_await self->readFrames();
        }
      },
      [self = shared_from_this()](std::exception_ptr) {
        self->endAuthentication();
        self->close();
        self->backend_.forget(self, false);
      });
}

// SEC-1: nothing is read as a frame until the peer has proved it holds the
// job secret; a peer that stalls is cut off by the deadline.
asio::awaitable<bool> Link::authenticateClient() {
  static log::RateLimit rejectedLog;  // a flood of bad connections logs once a second
  const auto& options = backend_.options();
  asio::steady_timer deadline(strand_);
  deadline.expires_after(options.authTimeout);
  deadline.async_wait([this](boost::system::error_code ec) {
    if (!ec) close();
  });
  LinkSession session;
  try {
    ServerHandshake handshake(options.secret, options.security, options.rank, options.size);
    auto hello = handshake.hello();
    co_await asio::async_write(socket_, asio::buffer(hello), asio::use_awaitable);
    std::array<std::uint8_t, kClientAuthBytes> clientAuth{};
    co_await asio::async_read(socket_, asio::buffer(clientAuth), asio::use_awaitable);
    std::array<std::uint8_t, kServerAuthBytes> answer{};
    try {
      answer = handshake.onClientAuth(clientAuth, session);
    } catch (const ProtocolError& e) {
      if (auto dropped = rejectedLog.admit()) {
        log::get().warn("rejected connection from {}: {} ({} such lines dropped)", remote_,
                        e.what(), *dropped);
      }
      co_return false;
    }
    co_await asio::async_write(socket_, asio::buffer(answer), asio::use_awaitable);
    peer_ = session.peer;
  } catch (const std::exception& e) {
    if (auto dropped = rejectedLog.admit()) {
      log::get().warn("rejected connection from {}: handshake did not complete ({}; {} such "
                      "lines dropped)",
                      remote_, e.what(), *dropped);
    }
    co_return false;
  }
  deadline.cancel();
  {
    std::lock_guard lock(mutex_);
    beginSession(session);
  }
  co_return true;
}


}  // namespace crown::transport
