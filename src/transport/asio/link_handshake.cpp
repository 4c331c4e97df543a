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
    co_await socket_.async_connect(backend_.target(peer_), asio::use_awaitable);
    connected = true;
    tuneSocket(socket_);
    remote_ = where;

    ClientHandshake handshake(options.secret, options.security, options.rank, peer_);
    std::array<std::uint8_t, kHelloBytes> hello{};
    co_await asio::async_read(socket_, asio::buffer(hello), asio::use_awaitable);
    auto clientAuth = handshake.onHello(hello);
    co_await asio::async_write(socket_, asio::buffer(clientAuth), asio::use_awaitable);
    std::array<std::uint8_t, kServerAuthBytes> answer{};
    co_await asio::async_read(socket_, asio::buffer(answer), asio::use_awaitable);
    session = handshake.onServerAuth(answer);
  } catch (const boost::system::system_error& e) {
    deadline.cancel();
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

void Link::startServer() {
  asio::co_spawn(
      strand_,
      [self = shared_from_this()]() -> asio::awaitable<void> {
        if (co_await self->authenticateClient()) {
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
        self->close();
        self->backend_.forget(self, false);
      });
}

// SEC-1: nothing is read as a frame until the peer has proved it holds the
// job secret; a peer that stalls is cut off by the deadline.
asio::awaitable<bool> Link::authenticateClient() {
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
      log::get().warn("rejected connection from {}: {}", remote_, e.what());
      co_return false;
    }
    co_await asio::async_write(socket_, asio::buffer(answer), asio::use_awaitable);
    peer_ = session.peer;
  } catch (const std::exception& e) {
    log::get().warn("rejected connection from {}: handshake did not complete ({})", remote_,
                    e.what());
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
