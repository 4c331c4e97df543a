// ShmBackend, the shared-memory backend (shm_backend.h), declared for its
// two files: shm_backend.cpp (made, started, sending, departing, stopping)
// and shm_backend_links.cpp (heartbeats, connecting, accepting, serving,
// a refusal, losing a peer).
//
// Threads: one accepts links; each inbound link has a reader, which runs
// its handshake (link_setup.h, bounded by the auth timeout) and then reads
// its ring, spinning briefly and then asleep when idle; each outbound link
// has a watcher, asleep in poll() on its socket until the peer's heartbeat
// bytes come or it goes (links.h). Frames are written by the sender's own
// thread, under the link's mutex, and delivered by the link's reader, so
// frames to one peer keep their order (ORD-1's transport half). onMessage
// runs on the reader, and so does the handler it starts, with no hand-off
// to the pool: a reader whose handler blocks or runs long hands the
// reading on to another thread of the link (reader_turns.h, relief_watch.h).
// The failure callbacks run on the pool, never on the sender's thread.
//
// Heartbeats: every interval a pool task (tick) writes one byte to each
// link's socket, both ways, and takes for lost a peer heard from on none of
// its links (a ring record or a socket byte) for interval x misses: a
// stopped or hung process keeps its sockets open. Sent by the pool, as the
// Asio links' are, so a process whose pool is stuck falls silent too.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/shm/links.h"
#include "transport/shm/liveness.h"
#include "transport/shm/relief_watch.h"
#include "transport/shm/shm_backend.h"

namespace crown::transport::shm {

using Clock = std::chrono::steady_clock;
using Kind = LinkError::Kind;

constexpr std::size_t kRingBytes = 1 << 20;
// A reader looks at its socket (a closed end, heartbeat bytes) this often,
// and at least once a heartbeat interval.
constexpr std::chrono::milliseconds kReadSlice{100};
constexpr std::chrono::seconds kWriteBound{60};  // a ring that stays full this long: lost

inline Clock::time_point fromTicks(std::int64_t ticks) {
  return Clock::time_point(Clock::duration(ticks));
}

class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(const AsioOptions& options);
  ~ShmBackend() override;
  std::string name() const override { return "shm"; }
  std::string address() const override { return name_ + "\n" + options_.host; }
  bool reaches(const std::string& address) const override {
    auto newline = address.find('\n');
    return newline != std::string::npos && address.substr(newline + 1) == options_.host;
  }
  std::string describe(const std::string& address) const override {
    return "@" + address.substr(0, address.find('\n')) + " (shared memory)";
  }

  void start(std::vector<std::string> peers, TransportCallbacks callbacks) override;
  std::optional<Clock::time_point> lastHeard(Rank peer) const override;

  // A replacement in a lost rank's slot: a new link to it on the next frame.
  void admit(Rank rank, const std::string& address) override;
  void send(Rank to, OutMessage message) override;

  // Into every ring this rank writes, each bounded by `bound` together: a
  // sender stuck on a full ring holds its link, which then stays silent.
  void depart(const std::string& lastWords, std::chrono::milliseconds bound) override;
  void stop(std::chrono::milliseconds) override;

 private:
  using Out = OutLink;
  using In = InLink;
  // Ticks are pool tasks that may outlive the backend: they hold this and
  // run only while it says so (stop() sets it under the mutex).
  struct Ticks {
    std::mutex mutex;
    bool stopped = false;
  };
  void scheduleTick();

  // Beats on every link and looks for silent peers. A tick this late means
  // this process was stopped or starved: the silence was its own, so what
  // it heard counts as heard now.
  void tick(Clock::time_point due);
  bool readsFrom(Rank peer);
  std::shared_ptr<Out> outTo(Rank to);
  std::optional<LinkError> lostError(Rank peer);

  // The peer is lost: told once, its outbound ring closed (a writer waiting
  // on it wakes). Not while this backend stops: then links closing are ours.
  void markLost(Rank peer, const LinkError& error);
  void handBack(Rank to, OutMessage message, LinkError error);

  // The outbound link to `to`: connect, authenticate, pass a new ring.
  // Called under out.mutex; nullopt when the link is up.
  std::optional<LinkError> connect(Rank to, Out& out);
  void accept();
  bool serve(In& in);

  // The peer refused a frame of this link and closed it, as an Asio link's
  // peer does (SEC-1): the link goes, the requests written on it fail
  // (DLV-1: their answers would have come back on it), nobody is lost, and
  // the next frame to the peer opens a new link.
  void refusedBy(Rank to, Out& out, const std::string& why);
  void answered(Rank peer, std::uint64_t id);
  static LinkError closedByPeer() {
    return {Kind::kClosed, "the peer's process closed its shared-memory link"};
  }

  void noteLastWords(Rank peer, std::string words);

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
  std::chrono::nanoseconds ringSpin_{0};   // how long a ring's waiter spins (start())
  ReliefWatch relief_{ReliefWatch::budgetFromEnv()};
  std::thread acceptor_;
};

}  // namespace crown::transport::shm
