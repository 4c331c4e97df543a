// The routing transport: one Transport over several backends, each peer
// routed to the first backend (in order of preference) that reaches it.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "crown/common/log.h"
#include "crown/transport/transport.h"

namespace crown::transport {

namespace {

void putU32(std::string& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint32_t getU32(const std::string& in, std::size_t& at) {
  if (at > in.size() || in.size() - at < 4) throw ProtocolError("a rank's address is truncated");
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= std::uint32_t{static_cast<std::uint8_t>(in[at + i])} << (8 * i);
  at += 4;
  return value;
}

std::string getText(const std::string& in, std::size_t& at) {
  std::uint32_t size = getU32(in, at);
  if (in.size() - at < size) throw ProtocolError("a rank's address is truncated");
  std::string text = in.substr(at, size);
  at += size;
  return text;
}

class RoutingTransport final : public Transport {
 public:
  RoutingTransport(std::vector<std::unique_ptr<Backend>> backends, Rank rank, Rank size)
      : backends_(std::move(backends)), rank_(rank), size_(size) {
    CROWN_CHECK(!backends_.empty(), "a routing transport needs a backend");
  }
  ~RoutingTransport() override { stop(std::chrono::milliseconds(0)); }

  std::string address() const override {
    Addresses addresses;
    for (const auto& backend : backends_) addresses.emplace_back(backend->name(), backend->address());
    return encodeAddresses(addresses);
  }

  void start(std::vector<std::string> peers, TransportCallbacks callbacks) override {
    CROWN_CHECK(peers.size() == size_, "one address per rank is needed");
    route_ = std::make_unique<std::atomic<std::size_t>[]>(size_);
    for (Rank r = 0; r < size_; ++r) route_[r].store(kVacant, std::memory_order_relaxed);
    lost_.assign(size_, false);
    std::vector<std::vector<std::string>> byBackend(backends_.size(),
                                                    std::vector<std::string>(size_));
    for (Rank r = 0; r < size_; ++r) {
      if (peers[r].empty()) continue;  // a slot for a rank that joins later (admit)
      auto chosen = choose(decodeAddresses(peers[r]));
      route_[r].store(chosen ? chosen->first : kNoRoute, std::memory_order_relaxed);
      if (chosen) byBackend[chosen->first][r] = chosen->second;
    }
    callbacks_ = std::move(callbacks);
    TransportCallbacks relayed = callbacks_;
    relayed.onPeerLost = [this](Rank peer, const LinkError& error) { reportLost(peer, error); };
    for (std::size_t b = 0; b < backends_.size(); ++b)
      backends_[b]->start(std::move(byBackend[b]), relayed);
    started_ = true;
  }

  void admit(Rank rank, const std::string& address) override {
    CROWN_CHECK(started_, "admit before start");
    if (rank >= size_ || rank == rank_) {
      throw ConfigError("rank " + std::to_string(rank) + " cannot join a transport of " +
                        std::to_string(size_) + " slots as rank " + std::to_string(rank_));
    }
    auto chosen = choose(decodeAddresses(address));
    if (!chosen) {
      throw ConfigError("no backend of rank " + std::to_string(rank_) + " reaches rank " +
                        std::to_string(rank) + " at the address it gave");
    }
    backends_[chosen->first]->admit(rank, chosen->second);
    route_[rank].store(chosen->first, std::memory_order_release);  // after the backend knows it
  }

  void send(Rank to, OutMessage message) override {
    if (to >= size_) {
      throw ConfigError("rank " + std::to_string(to) + " does not exist (size " +
                        std::to_string(size_) + ")");
    }
    std::size_t route = route_[to].load(std::memory_order_acquire);
    if (route == kVacant) {  // nobody there yet: refused, and nobody is lost
      callbacks_.onSendFailed(to, std::move(message),
                              LinkError{LinkError::Kind::kRefused,
                                        "rank " + std::to_string(to) + " has not joined"});
      return;
    }
    if (route != kNoRoute) return backends_[route]->send(to, std::move(message));
    LinkError error{LinkError::Kind::kRefused,
                    "no backend of rank " + std::to_string(rank_) + " reaches rank " +
                        std::to_string(to) + " at the address it gave"};
    callbacks_.onSendFailed(to, std::move(message), error);
    reportLost(to, error);
  }

  void depart(const std::string& lastWords, std::chrono::milliseconds bound) override {
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (auto& backend : backends_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      backend->depart(lastWords, std::max(left, std::chrono::milliseconds(0)));
    }
  }

  // The latest over every backend, not only the peer's route: each side
  // picks its own, so the link the peer opened may be on another backend.
  std::optional<std::chrono::steady_clock::time_point> lastHeard(Rank peer) const override {
    std::optional<std::chrono::steady_clock::time_point> latest;
    for (const auto& backend : backends_) {
      auto heard = backend->lastHeard(peer);
      if (heard && (!latest || *heard > *latest)) latest = heard;
    }
    return latest;
  }

  void stop(std::chrono::milliseconds flushTimeout) override {
    if (!started_) return;
    started_ = false;
    for (auto& backend : backends_) backend->stop(flushTimeout);
  }

 private:
  static constexpr std::size_t kNoRoute = ~std::size_t{0};  // no backend reaches it
  static constexpr std::size_t kVacant = kNoRoute - 1;       // no address yet

  // The first backend, in order of preference, that reaches one of the
  // offered addresses: its index and its part of the address.
  std::optional<std::pair<std::size_t, std::string>> choose(const Addresses& offered) const {
    for (std::size_t b = 0; b < backends_.size(); ++b) {
      for (const auto& [name, address] : offered) {
        if (name == backends_[b]->name() && backends_[b]->reaches(address)) {
          return std::make_pair(b, address);
        }
      }
    }
    return std::nullopt;
  }

  // Once per peer, whichever backend noticed.
  void reportLost(Rank peer, const LinkError& error) {
    {
      std::lock_guard lock(mutex_);
      if (peer >= lost_.size() || lost_[peer]) return;
      lost_[peer] = true;
    }
    if (callbacks_.onPeerLost) callbacks_.onPeerLost(peer, error);
  }

  std::vector<std::unique_ptr<Backend>> backends_;
  Rank rank_;
  Rank size_;
  // By rank: set at start, and once more for a rank that joins (admit).
  std::unique_ptr<std::atomic<std::size_t>[]> route_;
  TransportCallbacks callbacks_;
  bool started_ = false;
  std::mutex mutex_;
  std::vector<bool> lost_;
};

}  // namespace

std::string encodeAddresses(const Addresses& addresses) {
  std::string out;
  putU32(out, static_cast<std::uint32_t>(addresses.size()));
  for (const auto& [name, address] : addresses) {
    putU32(out, static_cast<std::uint32_t>(name.size()));
    out += name;
    putU32(out, static_cast<std::uint32_t>(address.size()));
    out += address;
  }
  return out;
}

Addresses decodeAddresses(const std::string& bytes) {
  std::size_t at = 0;
  std::uint32_t count = getU32(bytes, at);
  if (count > 64) throw ProtocolError("a rank's address names " + std::to_string(count) +
                                      " backends");
  Addresses addresses;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string name = getText(bytes, at);
    addresses.emplace_back(std::move(name), getText(bytes, at));
  }
  if (at != bytes.size()) throw ProtocolError("a rank's address has trailing bytes");
  return addresses;
}

std::unique_ptr<Transport> makeRoutingTransport(std::vector<std::unique_ptr<Backend>> backends,
                                                Rank rank, Rank size) {
  return std::make_unique<RoutingTransport>(std::move(backends), rank, size);
}

}  // namespace crown::transport
