#include "transport/shm/links.h"

#include <poll.h>

#include <sys/socket.h>

#include <cerrno>

#include "crown/common/log.h"
#include "transport/inline_tasks.h"
#include "transport/shm/record.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {

std::int64_t ticksNow() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

void OutLink::expect(std::uint64_t id) {
  std::lock_guard lock(flightMutex);
  inFlight.insert(id);
}

void OutLink::settled(std::uint64_t id) {
  std::lock_guard lock(flightMutex);
  inFlight.erase(id);
}

std::optional<LinkError> OutLink::refusal() {
  std::lock_guard lock(flightMutex);
  return refused;
}

std::unordered_set<std::uint64_t> OutLink::refuse(const LinkError& error) {
  std::unordered_set<std::uint64_t> taken;
  {
    std::lock_guard lock(flightMutex);
    refused = error;
    taken.swap(inFlight);
  }
  if (Ring* made = open.load()) made->close();
  return taken;
}

std::optional<SocketNews> OutLink::watch(int wakeFd) {
  int fd = socket.load();
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN | POLLRDHUP, 0}, {wakeFd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (fds[1].revents != 0) return std::nullopt;
    SocketNews news = readNews(fd);
    if (news.heard) heard = ticksNow();
    if (news.hungUp) return news;
  }
}

InLink::End InLink::read(std::chrono::milliseconds slice, const wire::FrameLimits& limits,
                         const Sink& sink, const Executor& executor) {
  for (;;) {
    std::uint64_t length = 0;
    Ring::Result got = ring->begin(length, slice);
    if (got == Ring::Result::kDone) {
      heard = ticksNow();
      Frame frame;
      try {
        Taken taken = readFrame(*ring, length, limits, lender, frame);
        if (taken == Taken::kAgain) continue;
        if (taken == Taken::kClosed) break;  // the ring closed mid-record: the peer is gone
      } catch (const std::exception& e) {
        log::get().warn(
            "shared-memory backend: refused a frame from rank {} and closed the link: {}", peer,
            e.what());
        sendRefusal(socket, e.what());
        ::shutdown(socket, SHUT_RDWR);
        up = false;
        return End::kRefused;
      }
      auto kind = frame.envelope.kind;
      if (kind == wire::MessageKind::kReply || kind == wire::MessageKind::kFailure) {
        sink.onAnswer(peer, frame.envelope.requestId);
      }
      if (kind != wire::MessageKind::kNotice) {
        // Delivered on the reader's own thread, never relieved meanwhile, so
        // frames from one peer keep their order (ORD-1, as a link's strand
        // keeps it): a stream's entry is taken before its final answer. The
        // handler the delivery starts runs here too, with no hand-off, and
        // only that may be relieved, when it blocks or runs long.
        InlineTasks deferred(executor);
        sink.onFrame(peer, std::move(frame.envelope), std::move(frame.payload));
        if (deferred.empty()) continue;
        turns->beginInline();
        deferred.runAll();
        if (!turns->endInline()) return End::kRelieved;
      } else if (frame.envelope.type == wire::kNoticeDeparting) {
        sink.onLastWords(peer, std::move(frame.payload));
      }  // another notice is of a later version: nothing to do here
      continue;
    }
    if (got == Ring::Result::kTimedOut) {
      SocketNews news = readNews(socket);
      if (news.heard) heard = ticksNow();
      if (!news.hungUp) continue;
    }
    break;
  }
  up = false;  // closed, or the peer's process is gone
  return End::kPeerGone;
}

}  // namespace crown::transport::shm
