// The routing transport: one Transport over several backends, each peer
// routed to the first backend (in order of preference) that reaches it.
#include <algorithm>
#include <mutex>

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
    route_.assign(size_, kNoRoute);
    lost_.assign(size_, false);
    std::vector<std::vector<std::string>> byBackend(backends_.size(),
                                                    std::vector<std::string>(size_));
    for (Rank r = 0; r < size_; ++r) {
      Addresses offered = decodeAddresses(peers[r]);
      for (std::size_t b = 0; b < backends_.size() && route_[r] == kNoRoute; ++b) {
        for (const auto& [name, address] : offered) {
          if (name == backends_[b]->name() && backends_[b]->reaches(address)) {
            route_[r] = b;
            byBackend[b][r] = address;
            break;
          }
        }
      }
    }
    callbacks_ = std::move(callbacks);
    TransportCallbacks relayed = callbacks_;
    relayed.onPeerLost = [this](Rank peer, const LinkError& error) { reportLost(peer, error); };
    for (std::size_t b = 0; b < backends_.size(); ++b)
      backends_[b]->start(std::move(byBackend[b]), relayed);
    started_ = true;
  }

  void send(Rank to, OutMessage message) override {
    if (to >= size_) {
      throw ConfigError("rank " + std::to_string(to) + " does not exist (size " +
                        std::to_string(size_) + ")");
    }
    std::size_t route = route_[to];
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

  void stop(std::chrono::milliseconds flushTimeout) override {
    if (!started_) return;
    started_ = false;
    for (auto& backend : backends_) backend->stop(flushTimeout);
  }

 private:
  static constexpr std::size_t kNoRoute = ~std::size_t{0};

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
  std::vector<std::size_t> route_;  // fixed once started
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
