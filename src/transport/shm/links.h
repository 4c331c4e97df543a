// The two ends of a shared-memory link (shm_backend.h) and what their
// threads do. An OutLink is this rank's writing end: its ring, written under
// its mutex, and a watcher asleep on its socket for the peer's heartbeat
// bytes and hang-up. An InLink is a reading end: its reader takes records
// from the ring and, between them, the socket's news. The backend decides
// what a hang-up or a silence means (shm_backend.cpp, markLost).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "crown/common/executor.h"
#include "crown/transport/transport.h"
#include "transport/shm/reader_turns.h"
#include "transport/shm/ring.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {

/// steady_clock ticks, for the links' atomics.
std::int64_t ticksNow();

struct OutLink {
  std::mutex mutex;             // one writer at a time: frames to the peer keep their order
  std::atomic<int> socket{-1};  // set once the link is up, closed at stop
  std::optional<Ring> ring;
  std::atomic<Ring*> open{nullptr};    // ring, once made: closed by markLost without the mutex
  std::atomic<std::int64_t> heard{0};  // ticks of the peer's last heartbeat byte
  std::thread watcher;
  // The requests written into the ring and not answered yet: failed if the
  // peer refuses a frame and closes the link (DLV-1: their answers would
  // have come back on it). With why it was closed so, once it was.
  std::mutex flightMutex;
  std::unordered_set<std::uint64_t> inFlight;
  std::optional<LinkError> refused;

  /// A request about to be written into the ring (before: its answer may
  /// come at once).
  void expect(std::uint64_t id);
  /// Its answer came, or its write failed (it is then handed back whole).
  void settled(std::uint64_t id);
  /// Why the peer refused a frame and closed the link, if it did.
  std::optional<LinkError> refusal();
  /// The peer refused a frame and closed the link: the ring is closed (a
  /// writer waiting on it wakes) and the requests in flight are returned.
  std::unordered_set<std::uint64_t> refuse(const LinkError& error);

  /// The watcher's body: asleep until heartbeat bytes come (noted in
  /// heard), then the socket's last news once the peer's end goes (its
  /// refusal, if it sent one), or nullopt once `wakeFd` is readable.
  std::optional<SocketNews> watch(int wakeFd);
};

struct InLink {
  Rank peer = 0;
  int socket = -1;
  pid_t lender = 0;  // the writer's process, from its socket: whose lent payloads are read
  std::atomic<bool> up{false};  // authenticated, its ring attached; false once read to the end
  std::optional<Ring> ring;
  std::atomic<std::int64_t> heard{0};  // ticks of the last record or heartbeat byte
  std::shared_ptr<ReaderTurns> turns;  // who reads it

  struct Sink {
    std::function<void(Rank, wire::Envelope&&, wire::Bytes&&)> onFrame;
    std::function<void(Rank, std::uint64_t)> onAnswer;   // a reply's request id, before onFrame
    std::function<void(Rank, std::string)> onLastWords;  // a departing notice
  };
  enum class End {
    kPeerGone,  ///< the ring closed or the peer's end of the socket went
    kRefused,   ///< a frame broke the format or the limits: refused, the link closed
    kRelieved,  ///< this thread ran a handler and was relieved meanwhile (turns)
  };
  /// The reader's body: records to the sink until the ring closes or the
  /// peer's end of the socket goes, looking at the socket at least every
  /// `slice`. What the peer wrote before it went is read first. A bad frame
  /// is refused back over the socket (sendRefusal), and the link closed.
  /// What a frame's delivery defers to `executor` runs here, right after it
  /// (inline_tasks.h), unless `turns` relieves this thread of the reading.
  End read(std::chrono::milliseconds slice, const wire::FrameLimits& limits, const Sink& sink,
           const Executor& executor);
};

}  // namespace crown::transport::shm
