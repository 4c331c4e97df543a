#include "transport/asio/link.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "crown/common/log.h"

namespace crown::transport {
namespace {

using tcp = asio::ip::tcp;
using Kind = LinkError::Kind;
using namespace std::chrono_literals;

constexpr std::size_t kMaxBatchFrames = 256;
constexpr std::size_t kMaxBatchBytes = 4 << 20;
// Frames sent closer together than this on one link count as a stream.
constexpr auto kStreamingGap = std::chrono::microseconds(10);
// A frame of more buffers than this waits for the strand's gathered write.
constexpr std::size_t kMaxDirectBuffers = 64;

// "address:port" of a TCP peer, for logs; "local socket" otherwise.
std::string describeRemote(Socket& socket) {
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

}  // namespace

LinkError connectionError(const boost::system::error_code& ec, const std::string& what) {
  Kind kind = ec == asio::error::eof ? Kind::kClosed : Kind::kReset;
  return {kind, what + ": " + ec.message()};
}

// The buffers of `frame` from its first unwritten byte to its last ready
// one, appended to `out`.
template <class Out>
void Link::gatherBuffers(const QueuedFrame& frame, Out& out) {
  std::size_t skip = frame.written;
  std::size_t room = frame.ready() - frame.written;
  auto add = [&](const char* data, std::size_t size) {
    if (skip >= size) {
      skip -= size;
      return;
    }
    std::size_t n = std::min(size - skip, room);
    if (n > 0) out.emplace_back(data + skip, n);
    room -= n;
    skip = 0;
  };
  add(frame.head.data(), frame.head.size());
  if (frame.encrypted) {
    skip -= std::min(skip, frame.cipherBegin);  // written before this chunk was sealed
    add(frame.ciphertext.data(), frame.ciphertext.size());
  } else {
    const auto& payload = frame.message.payload;
    add(payload.head().data(), payload.head().size());
    for (const auto& segment : payload.segments()) add(segment.data, segment.size);
  }
  add(frame.tag.data(), frame.tagBytes);
}

bool isLocalShortage(const boost::system::error_code& ec) {
  using boost::system::errc::errc_t;
  return ec == errc_t::too_many_files_open || ec == errc_t::too_many_files_open_in_system ||
         ec == errc_t::no_buffer_space || ec == errc_t::not_enough_memory;
}

bool isTcp(Socket& socket) {
  int family = socket.local_endpoint().protocol().family();
  return family == AF_INET || family == AF_INET6;
}

// Bulk payloads move in fewer, larger writes and reads with socket buffers
// past the 208 KiB default (the kernel caps them at net.core.[rw]mem_max).
constexpr int kSocketBufferBytes = 4 << 20;

void tuneSocket(Socket& socket) {
  boost::system::error_code ignored;
  if (isTcp(socket)) socket.set_option(tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::send_buffer_size(kSocketBufferBytes), ignored);
  socket.set_option(asio::socket_base::receive_buffer_size(kSocketBufferBytes), ignored);
  socket.non_blocking(true, ignored);
}

Link::Link(AsioBackend& backend, Rank peer)
    : backend_(backend),
      peer_(peer),
      strand_(asio::make_strand(backend.io())),
      socket_(strand_) {}

Link::Link(AsioBackend& backend, Strand strand, Socket socket, std::string source)
    : backend_(backend),
      strand_(std::move(strand)),
      socket_(std::move(socket)),
      remote_(describeRemote(socket_)),
      source_(std::move(source)) {
  tuneSocket(socket_);
}

void Link::send(OutMessage message) {
  QueuedFrame frame;
  frame.head = wire::encodeFrameHead(message.envelope, message.payload.size());
  frame.message = std::move(message);
  std::unique_lock lock(mutex_);
  if (frame.message.envelope.kind == wire::MessageKind::kRequest && state_ != State::kDead) {
    inFlight_.insert(frame.message.envelope.requestId);
  }
  switch (state_) {
    case State::kDead: {
      LinkError error = error_.value_or(LinkError{Kind::kClosed, "link is closed"});
      lock.unlock();
      backend_.callbacks().onSendFailed(peer_, std::move(frame.message), error);
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
                       } catch (const LinkFailure& e) {
                         self->fail(e.error);
                       } catch (const std::exception& e) {
                         self->fail({Kind::kReset, e.what()});
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
      seal(frame);
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
  if (frame.streamed || frame.message.payload.segments().size() + 3 > kMaxDirectBuffers) {
    return false;
  }
  // On the stack: this is every request's path.
  struct Iovecs {
    iovec entries[kMaxDirectBuffers];
    std::size_t count = 0;
    void emplace_back(const char* data, std::size_t size) {
      entries[count++] = iovec{const_cast<char*>(data), size};
    }
  } iov;
  gatherBuffers(frame, iov);
  msghdr msg{};
  msg.msg_iov = iov.entries;
  msg.msg_iovlen = iov.count;
  ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    int error = errno;
    asio::post(strand_, [self = shared_from_this(), error] {
      self->fail({Kind::kReset, std::string("send failed: ") + std::strerror(error)});
    });
    return false;  // the frame stays queued and is handed back by fail()
  }
  frame.written = static_cast<std::size_t>(n);
  return frame.written == frame.size();
}

void Link::startWrite() {
  std::vector<asio::const_buffer> buffers;
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kReady) return;
    std::size_t frames = 0;
    for (auto& frame : queue_) {
      if (frames == kMaxBatchFrames || (frames > 0 && bytes >= kMaxBatchBytes)) break;
      if (frame.streamed && frame.written == frame.ready()) sealNextChunk(frame);
      gatherBuffers(frame, buffers);
      bytes += frame.ready() - frame.written;
      ++frames;
      if (frame.ready() < frame.size()) break;  // the rest of it is not sealed yet
    }
    if (bytes == 0) {
      writing_ = false;
      return;
    }
  }
  // Buffers point into queue_ entries: deque::push_back never moves existing
  // elements, and only this completion pops them.
  asio::async_write(socket_, buffers,
                    asio::bind_executor(strand_, [self = shared_from_this(), bytes](
                                                     boost::system::error_code ec, std::size_t) {
                      if (ec) {
                        self->fail(connectionError(ec, "write failed"));
                        return;
                      }
                      self->wrote(bytes);
                      self->startWrite();
                    }));
}

void Link::wrote(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  while (bytes > 0 && !queue_.empty()) {
    QueuedFrame& front = queue_.front();
    std::size_t n = std::min(bytes, front.ready() - front.written);
    if (n == 0) break;
    front.written += n;
    bytes -= n;
    if (front.written == front.size()) queue_.pop_front();
  }
}

// Hands queued frames back and closes the link. When error.peerLost() the
// connection itself broke, which is how a dead process shows (named by its
// last words when it sent them); a bad frame closes only this link (SEC-1),
// fails the requests that were in flight on it (DLV-1: their answers would
// have come back on it), and the next send to that peer opens a new one.
void Link::fail(const LinkError& givenError) {
  LinkError error = givenError;
  if (error.peerLost()) {
    // Silence after a timeout says nothing of how a peer went, and a link
    // that closes as this process wakes from a suspension was most likely
    // closed by a peer that had given it up.
    std::string suspended = backend_.suspensionNote();
    bool broke = (error.kind == Kind::kClosed || error.kind == Kind::kReset) && suspended.empty();
    error.message += backend_.lastWordsNote(peer_, broke) + suspended;
  }
  std::deque<QueuedFrame> lost;
  std::unordered_set<std::uint64_t> inFlight;
  {
    std::lock_guard lock(mutex_);
    if (state_ == State::kDead) return;
    state_ = State::kDead;
    error_ = error;
    lost.swap(queue_);
    inFlight.swap(inFlight_);
  }
  asio::post(strand_, [self = shared_from_this()] {
    boost::system::error_code ignored;
    self->heartbeat_.cancel();
    self->socket_.close(ignored);
  });
  backend_.forget(shared_from_this(), !error.peerLost());
  for (auto& frame : lost) {
    if (frame.message.envelope.kind == wire::MessageKind::kRequest) {
      inFlight.erase(frame.message.envelope.requestId);  // handed back whole, below
    }
    backend_.callbacks().onSendFailed(peer_, std::move(frame.message), error);
  }
  if (!error.peerLost()) {  // a lost peer's requests all fail through onPeerLost
    Rank rank = backend_.options().rank;
    for (std::uint64_t id : inFlight) {
      OutMessage written{{wire::MessageKind::kRequest, {rank, 0}, {peer_, 0}, id, ""}, {}};
      backend_.callbacks().onSendFailed(peer_, std::move(written), error);
    }
  }
  if (error.peerLost() && !backend_.stopping()) backend_.reportPeerLost(peer_, error);
}

// Frames are sealed on TCP links only. A connected Unix stream socket has
// exactly two ends, both proved by the handshake, and the kernel carries
// its bytes: no third process can forge, replay, reorder, cut in or read a
// frame on it, so a tag would cost a pass over every payload (half the
// bandwidth of a same-host link) and protect nothing (SEC-1; README, "Threat
// model").
void Link::beginSession(const LinkSession& session) {
  if (session.security != FabricSecurity::kAuth && isTcp(socket_)) {
    sealer_.emplace(session.security, session.sendKey);
    opener_.emplace(session.security, session.receiveKey);
  }
  for (auto& frame : queue_) seal(frame);
}

void Link::seal(QueuedFrame& frame) {
  if (!sealer_ || frame.sealed) return;
  frame.sealed = true;
  frame.encrypted = sealer_->security() == FabricSecurity::kEncrypt;
  if (frame.message.payload.size() > kStreamedSealBytes) {
    frame.streamed = sealer_->beginStreamed(frame.head);
    return;
  }
  sealer_->seal(frame.head, frame.message.payload, frame.ciphertext, frame.tag);
  frame.tagBytes = kFrameTagBytes;
}

void Link::sealNextChunk(QueuedFrame& frame) {
  const auto& payload = frame.message.payload;
  std::size_t size = std::min(kStreamedSealBytes, payload.size() - frame.bodySealed);
  char* out = nullptr;
  if (frame.encrypted) {
    frame.ciphertext.resize(size);
    frame.cipherBegin = frame.bodySealed;
    out = frame.ciphertext.data();
  }
  frame.streamed->update(payload, frame.bodySealed, size, out);
  frame.bodySealed += size;
  if (frame.bodySealed == payload.size()) {
    frame.streamed->finish(frame.tag);
    frame.streamed.reset();
    frame.tagBytes = kFrameTagBytes;
  }
}

bool Link::idle() {
  std::lock_guard lock(mutex_);
  return state_ == State::kDead || state_ == State::kIdle || (queue_.empty() && !writing_);
}

bool Link::answered(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  return inFlight_.erase(id) > 0;
}

std::optional<std::chrono::steady_clock::time_point> Link::lastHeardFrom(Rank peer) {
  {
    // A server link learns its peer in the handshake (peer_ is 0 until
    // then); it is written before the link turns ready under mutex_.
    std::lock_guard lock(mutex_);
    if (state_ != State::kReady || peer_ != peer) return std::nullopt;
  }
  std::int64_t ticks = lastHeard_.load();
  if (ticks == 0) return std::nullopt;  // heartbeats off, and nothing read yet
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks));
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
  if (backend_.options().heartbeatInterval.count() == 0) return;
  lastHeard_ = std::chrono::steady_clock::now().time_since_epoch().count();
  scheduleHeartbeat();
}

void Link::scheduleHeartbeat() {
  const auto interval = backend_.options().heartbeatInterval;
  auto due = std::chrono::steady_clock::now() + interval;
  heartbeat_.expires_at(due);
  heartbeat_.async_wait([self = shared_from_this(), interval, due](boost::system::error_code ec) {
    if (ec) return;  // cancelled: the link is closing
    auto now = std::chrono::steady_clock::now();
    // A timer this late means this process was stopped (SIGSTOP, a
    // debugger) or starved: the silence was ours, not the peer's.
    if (now - due > interval) {
      auto late = std::chrono::duration_cast<std::chrono::milliseconds>(now - due);
      self->backend_.noteSuspension(late);
      self->lastHeard_ = now.time_since_epoch().count();
      self->scheduleHeartbeat();
      return;
    }
    auto heard = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(self->lastHeard_.load()));
    auto silence = std::chrono::duration_cast<std::chrono::milliseconds>(now - heard);
    if (silence > interval * self->backend_.options().heartbeatMisses) {
      self->fail({Kind::kTimeout, "no sign of life for " + std::to_string(silence.count()) +
                                      " ms (CROWN_HEARTBEAT_INTERVAL_MS x CROWN_HEARTBEAT_MISSES)"});
      return;
    }
    bool quiet = false;
    {
      std::lock_guard lock(self->mutex_);
      if (self->state_ != State::kReady) return;
      quiet = now - self->lastSend_ >= interval && self->queue_.empty();
    }
    if (quiet) {
      Rank rank = self->backend_.options().rank;
      self->send({{wire::MessageKind::kHeartbeat, {rank, 0}, {self->peer_, 0}, 0, ""}, {}});
    }
    self->scheduleHeartbeat();
  });
}

}  // namespace crown::transport
