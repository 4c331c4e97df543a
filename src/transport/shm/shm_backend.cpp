// ShmBackend's life (shm_backend_impl.h): made, started, sending, departing
// and stopping.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "crown/common/spin_wait.h"
#include "transport/shm/record.h"
#include "transport/shm/ring.h"
#include "transport/shm/shm_backend_impl.h"
#include "transport/shm/socket_util.h"

namespace crown::transport::shm {

ShmBackend::ShmBackend(const AsioOptions& options) : options_(options) {
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

ShmBackend::~ShmBackend() {
  stop(std::chrono::milliseconds(0));
  for (int fd : {listenFd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void ShmBackend::start(std::vector<std::string> peers, TransportCallbacks callbacks) {
  {
    std::lock_guard lock(mutex_);
    peers_ = std::move(peers);
    callbacks_ = std::move(callbacks);
    // A ring's waiter spins only while this host's ranks have a core each:
    // beyond that, spinners take the cores from the threads they wait for.
    auto local = std::count_if(peers_.begin(), peers_.end(),
                               [this](const std::string& peer) { return reaches(peer); });
    if (local <= static_cast<long>(std::thread::hardware_concurrency()))
      ringSpin_ = detail::spinBudget();
    acceptor_ = std::thread([this] { accept(); });
  }
  if (options_.heartbeatInterval.count() > 0) {
    suspension_.started();
    scheduleTick();
  }
}

std::optional<Clock::time_point> ShmBackend::lastHeard(Rank peer) const {
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
void ShmBackend::admit(Rank rank, const std::string& address) {
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

void ShmBackend::send(Rank to, OutMessage message) {
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
  LinkError error =
      written == Ring::Result::kTimedOut
          ? LinkError{Kind::kTimeout, "the peer took no frame for " +
                                          std::to_string(kWriteBound.count()) +
                                          " s (its shared-memory ring stayed full, or it "
                                          "never copied a lent payload)"}
          : LinkError{Kind::kClosed, "the peer closed its shared-memory link"};
  markLost(to, error);
  handBack(to, std::move(message), lostError(to).value_or(error));
}

// Into every ring this rank writes, each bounded by `bound` together: a
// sender stuck on a full ring holds its link, which then stays silent.
void ShmBackend::depart(const std::string& lastWords, std::chrono::milliseconds bound) {
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

void ShmBackend::stop(std::chrono::milliseconds flushBound) {
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
  // A reader ends within a read slice; one in a handler that does not
  // return within the bound is left to end with it, reading nothing more.
  auto bound = std::max<std::chrono::milliseconds>(flushBound, 3 * kReadSlice);
  for (auto& in : ins) {
    if (in->turns) in->turns->stop(bound);
    ::close(in->socket);
  }
  relief_.stop();
  if (ownsPool_) pool_->stop();
}

void ShmBackend::handBack(Rank to, OutMessage message, LinkError error) {
  auto shared = std::make_shared<OutMessage>(std::move(message));
  pool_->post(
      [this, to, shared, error] { callbacks_.onSendFailed(to, std::move(*shared), error); });
}

std::unique_ptr<Backend> makeShmBackend(const AsioOptions& options) {
  return std::make_unique<ShmBackend>(options);
}

}  // namespace crown::transport::shm
