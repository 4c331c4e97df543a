// Records what a Transport reports through its callbacks, for tests of any
// transport backend; waitFor() blocks until a condition on the record holds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "crown/transport/transport.h"

namespace crown::testing {

/// A one-way message to actor 2 of rank `to`, as the transport tests send.
inline transport::OutMessage testMessage(Rank to, wire::Payload payload) {
  return {{wire::MessageKind::kOneWay, {0, 0}, {to, 2}, 0, "test"}, std::move(payload)};
}

/// An Asio backend's options for rank `rank` of `size` on loopback, with
/// heartbeats off; tests set what they exercise on top.
inline transport::AsioOptions loopbackOptions(Rank rank, Rank size,
                                              const transport::Secret& secret) {
  transport::AsioOptions options;
  options.rank = rank;
  options.size = size;
  options.bindAddress = "127.0.0.1";
  options.host = "this-host";
  options.secret = secret;
  options.heartbeatInterval = std::chrono::milliseconds(0);
  return options;
}

struct TransportInbox {
  struct Received {
    Rank from;
    std::string type;
    std::string payload;
  };

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Received> received;
  std::vector<std::string> failed;             // payloads handed back
  std::vector<transport::LinkError> failures;  // why, for each of them
  std::vector<Rank> lost;
  std::vector<transport::LinkError> lostWhy;
  /// Runs in the delivery of each message, before it is recorded (set it
  /// before the transport starts).
  std::function<void(const wire::Bytes& payload)> onDeliver;

  transport::TransportCallbacks callbacks() {
    transport::TransportCallbacks callbacks;
    callbacks.onMessage = [this](Rank from, wire::Envelope&& envelope, wire::Bytes&& payload) {
      if (onDeliver) onDeliver(payload);
      record([&] { received.push_back({from, envelope.type, payload}); });
    };
    callbacks.onSendFailed = [this](Rank, transport::OutMessage&& message,
                                    const transport::LinkError& error) {
      record([&] {
        failed.push_back(std::move(message.payload).join());
        failures.push_back(error);
      });
    };
    callbacks.onPeerLost = [this](Rank peer, const transport::LinkError& error) {
      record([&] {
        lost.push_back(peer);
        lostWhy.push_back(error);
      });
    };
    return callbacks;
  }

  template <class Pred>
  bool waitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, timeout, pred);
  }

 private:
  template <class Change>
  void record(Change change) {
    std::lock_guard lock(mutex);
    change();
    changed.notify_all();
  }
};

}  // namespace crown::testing
