// The reading side of a Link: frames in, heartbeats and notices taken here,
// and the close after a bad frame, which tells the peer first (a notice) so
// that it does not take this rank for dead (link.h).
#include <array>

#include "crown/common/log.h"
#include "transport/asio/frame_reader.h"
#include "transport/asio/link.h"

namespace crown::transport {

using Kind = LinkError::Kind;
using namespace std::chrono_literals;

void Link::sendNotice(std::string_view type, const std::string& text) {
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kReady) return;
  }
  Rank rank = backend_.options().rank;
  send({{wire::MessageKind::kNotice, {rank, 0}, {peer_, 0}, 0, std::string(type)}, text});
}

bool Link::onNotice(const std::string& type, const std::string& text) {
  if (type == wire::kNoticeDeparting) {
    backend_.noteLastWords(peer_, text);
    return false;
  }
  if (type == wire::kNoticeBadFrame) {
    fail({Kind::kBadFrame, "rank " + std::to_string(peer_) +
                               " refused a frame from this rank and closed the link: " + text});
    return true;
  }
  return false;  // a notice of a later version: nothing to do here
}

asio::awaitable<void> Link::readFrames() {
  FrameReader reader(backend_.options().limits, opener_ ? &*opener_ : nullptr);
  std::string refused;
  try {
    for (;;) {
      auto space = reader.space();
      std::size_t n = co_await socket_.async_read_some(asio::buffer(space.data(), space.size()),
                                                       asio::use_awaitable);
      reader.commit(n);
      lastHeard_ = std::chrono::steady_clock::now().time_since_epoch().count();
      while (auto frame = reader.next()) {
        auto kind = frame->envelope.kind;
        if (kind == wire::MessageKind::kHeartbeat) continue;
        if (kind == wire::MessageKind::kNotice) {
          if (onNotice(frame->envelope.type, frame->payload)) co_return;
          continue;
        }
        if ((kind == wire::MessageKind::kReply || kind == wire::MessageKind::kFailure) &&
            !answered(frame->envelope.requestId)) {
          backend_.answered(peer_, frame->envelope.requestId);
        }
        backend_.callbacks().onMessage(peer_, std::move(frame->envelope),
                                       std::move(frame->payload));
      }
    }
  } catch (const ProtocolError& e) {
    // SEC-1: a bad frame closes this link and nothing else.
    log::get().error("closing link with rank {} ({}): {}", peer_, remote_, e.what());
    refused = e.what();
  } catch (const boost::system::system_error& e) {
    fail(connectionError(e.code(), "connection lost"));
    co_return;
  }
  co_await closeAfterNotice(refused);
}

// The peer would otherwise see only the connection close and take this rank
// for dead. The notice goes after what is queued (the peer reads those
// normally); then this side half-closes and reads what the peer still sends
// until it closes too: closing with unread bytes would reset the connection,
// and the reset could beat the notice.
asio::awaitable<void> Link::closeAfterNotice(const std::string& why) {
  constexpr auto kNoticeBound = 1s;  // for each of the two waits
  backend_.forget(shared_from_this(), true);  // from now on, sends open a new link
  sendNotice(wire::kNoticeBadFrame, why);
  asio::steady_timer timer(strand_);
  boost::system::error_code ec;
  auto deadline = std::chrono::steady_clock::now() + kNoticeBound;
  while (!idle() && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(1ms);
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  socket_.shutdown(asio::socket_base::shutdown_send, ec);
  timer.expires_after(kNoticeBound);
  timer.async_wait([self = shared_from_this()](boost::system::error_code error) {
    boost::system::error_code ignored;
    if (!error) self->socket_.cancel(ignored);
  });
  std::array<char, 4096> sink;
  do {
    co_await socket_.async_read_some(asio::buffer(sink),
                                     asio::redirect_error(asio::use_awaitable, ec));
  } while (!ec);
  timer.cancel();
  fail({Kind::kBadFrame, "link closed after a bad frame: " + why});
}

}  // namespace crown::transport
