#include "crown/transport/local.h"

#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "transport/io_pool_impl.h"

namespace crown::transport {

namespace asio = boost::asio;
using Strand = asio::strand<asio::io_context::executor_type>;

class LocalHub {
 public:
  LocalHub(std::shared_ptr<IoPool> pool, Rank size, wire::FrameLimits limits)
      : pool_(std::move(pool)), size_(size), limits_(limits) {
    for (Rank r = 0; r < size; ++r) strands_.push_back(asio::make_strand(IoPoolAccess::io(*pool_)));
    members_.assign(size, nullptr);
    callbacks_.resize(size);
    disconnected_.assign(size, false);
  }

  Rank size() const { return size_; }

  void attach(Rank rank, TransportCallbacks callbacks) {
    std::lock_guard lock(mutex_);
    callbacks_[rank] = std::move(callbacks);
    members_[rank] = &callbacks_[rank];
  }

  void detach(Rank rank) {
    std::lock_guard lock(mutex_);
    members_[rank] = nullptr;
  }

  // Frames to `to` go through its strand, so they arrive in send order (ORD-1).
  void send(Rank from, Rank to, OutMessage message) {
    if (to >= size_) {
      throw ConfigError("rank " + std::to_string(to) + " does not exist (size " +
                        std::to_string(size_) + ")");
    }
    std::optional<LinkError> refused;
    if (message.payload.size() > limits_.maxPayloadBytes) {
      // As a real receiver closes the link over it; the peer lives on.
      refused = LinkError{LinkError::Kind::kBadFrame,
                          "a payload of " + std::to_string(message.payload.size()) +
                              " bytes is over the frame limit"};
    }
    if (!refused) {
      std::lock_guard lock(mutex_);
      if (disconnected_[from] || disconnected_[to]) {
        refused = LinkError{LinkError::Kind::kReset, "link is down (simulated disconnection)"};
      } else if (members_[to] == nullptr) {
        refused = LinkError{LinkError::Kind::kRefused, "rank is not serving"};
      }
    }
    if (refused) {
      handBack(from, to, std::move(message), *refused);
      // As a real sender takes a peer that nobody answers for lost, once.
      if (refused->kind == LinkError::Kind::kRefused) reportLostOnce(from, to, *refused);
      return;
    }
    asio::post(strands_[to], [this, from, to, message = std::move(message)]() mutable {
      const TransportCallbacks* target = nullptr;
      {
        std::lock_guard lock(mutex_);
        if (!disconnected_[from] && !disconnected_[to]) target = members_[to];
      }
      if (target == nullptr) {
        return handBack(from, to, std::move(message),
                        {LinkError::Kind::kReset, "link is down (simulated disconnection)"});
      }
      target->onMessage(from, std::move(message.envelope), std::move(message.payload).join());
    });
  }

  void disconnect(Rank rank) {
    std::vector<std::pair<Rank, const TransportCallbacks*>> told;
    {
      std::lock_guard lock(mutex_);
      if (rank >= size_ || disconnected_[rank]) return;
      disconnected_[rank] = true;
      for (Rank r = 0; r < size_; ++r) {
        if (members_[r] != nullptr) told.emplace_back(r, members_[r]);
      }
    }
    const LinkError error{LinkError::Kind::kReset, "simulated disconnection"};
    for (auto [r, callbacks] : told) {
      if (r == rank) {
        for (Rank other = 0; other < size_; ++other) {
          if (other != rank) callbacks->onPeerLost(other, error);
        }
      } else {
        callbacks->onPeerLost(rank, error);
      }
    }
  }

 private:
  void reportLostOnce(Rank from, Rank to, const LinkError& error) {
    const TransportCallbacks* sender = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (!refusedPairs_.emplace(from, to).second) return;
      sender = members_[from];
    }
    if (sender != nullptr && sender->onPeerLost) sender->onPeerLost(to, error);
  }

  void handBack(Rank from, Rank to, OutMessage message, const LinkError& reason) {
    const TransportCallbacks* sender = nullptr;
    {
      std::lock_guard lock(mutex_);
      sender = members_[from];
    }
    if (sender != nullptr) sender->onSendFailed(to, std::move(message), reason);
  }

  std::shared_ptr<IoPool> pool_;
  Rank size_;
  wire::FrameLimits limits_;
  std::vector<Strand> strands_;
  std::mutex mutex_;  // guards members_, disconnected_, refusedPairs_ (callbacks_ is fixed once attached)
  std::vector<TransportCallbacks> callbacks_;
  std::vector<const TransportCallbacks*> members_;  // null: not serving
  std::vector<bool> disconnected_;
  std::set<std::pair<Rank, Rank>> refusedPairs_;  // (sender, rank not serving) told lost
};

namespace {

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalHub> hub, Rank rank) : hub_(std::move(hub)), rank_(rank) {
    CROWN_CHECK(rank_ < hub_->size(), "rank outside the local hub");
  }
  ~LocalTransport() override { stop(std::chrono::milliseconds(0)); }

  std::string address() const override { return "local:" + std::to_string(rank_); }
  void start(std::vector<std::string>, TransportCallbacks callbacks) override {
    hub_->attach(rank_, std::move(callbacks));
    started_ = true;
  }
  void send(Rank to, OutMessage message) override { hub_->send(rank_, to, std::move(message)); }
  void stop(std::chrono::milliseconds) override {
    if (started_) hub_->detach(rank_);
    started_ = false;
  }

 private:
  std::shared_ptr<LocalHub> hub_;
  Rank rank_;
  bool started_ = false;
};

}  // namespace

std::shared_ptr<LocalHub> makeLocalHub(std::shared_ptr<IoPool> pool, Rank size,
                                       wire::FrameLimits limits) {
  return std::make_shared<LocalHub>(std::move(pool), size, limits);
}

std::unique_ptr<Transport> makeLocalTransport(const std::shared_ptr<LocalHub>& hub, Rank rank) {
  return std::make_unique<LocalTransport>(hub, rank);
}

void disconnect(LocalHub& hub, Rank rank) { hub.disconnect(rank); }

}  // namespace crown::transport
