// A Transport moves frames between the ranks of one job. Its links run on an
// IoPool; callbacks run on the pool's threads and may hand work to the pool. send() may be
// called from any thread; frames from one thread to one peer arrive in the
// order they were sent (the transport's half of ORD-1).
//
// Failures are values, never exceptions across the io loop: a frame that
// cannot be delivered is handed back through onSendFailed, and a peer whose
// link dies is reported once through onPeerLost (DLV-1 builds on both).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "crown/transport/auth.h"
#include "crown/transport/io_pool.h"
#include "crown/wire/envelope.h"
#include "crown/wire/frame.h"
#include "crown/wire/serialize.h"

namespace crown::transport {

struct Endpoint {
  std::string host;  ///< numeric IP address
  std::uint16_t port = 0;
  /// Abstract Unix socket name (without its leading NUL) for peers on the
  /// same host; empty: reach this rank over TCP only.
  std::string local;
};

/// One message: where it goes and what it carries.
struct OutMessage {
  wire::Envelope envelope;
  wire::Bytes payload;
};

struct TransportCallbacks {
  /// A frame arrived from an authenticated peer.
  std::function<void(Rank from, wire::Envelope&&, wire::Bytes&&)> onMessage;
  /// A frame could not be delivered; the message is handed back.
  std::function<void(Rank to, OutMessage&&, const std::string& reason)> onSendFailed;
  /// The link to a peer died (closed, reset, refused). Reported once per peer.
  std::function<void(Rank peer, const std::string& reason)> onPeerLost;
};

class Transport {
 public:
  virtual ~Transport() = default;

  /// Where this rank listens; valid from construction.
  virtual Endpoint localEndpoint() const = 0;
  /// Every rank's endpoint, indexed by rank, then start serving.
  virtual void start(std::vector<Endpoint> peers, TransportCallbacks callbacks) = 0;
  /// Queues one frame to a peer (opening the link on first use).
  virtual void send(Rank to, OutMessage message) = 0;
  /// Flushes what is queued (for at most `flushTimeout`), then closes every link.
  virtual void stop(std::chrono::milliseconds flushTimeout) = 0;
};

struct AsioOptions {
  Rank rank = 0;
  Rank size = 1;
  std::string bindAddress;  ///< numeric IPv4/IPv6 address to listen on
  Secret secret{};
  wire::FrameLimits limits;
  std::chrono::milliseconds connectTimeout{10000};
  std::chrono::milliseconds authTimeout{5000};
  /// Every link sends a heartbeat when it has written nothing for this long,
  /// and a link that hears nothing for heartbeatInterval * heartbeatMisses is
  /// lost: a cut cable sends no reset (CROWN_HEARTBEAT_INTERVAL_MS,
  /// CROWN_HEARTBEAT_MISSES; an interval of 0 turns heartbeats off).
  std::chrono::milliseconds heartbeatInterval{1000};
  int heartbeatMisses = 5;
  /// Also listen on an abstract Unix socket, so that ranks on this host skip
  /// the TCP/IP stack (CROWN_SAME_HOST_TRANSPORT=tcp turns this off).
  bool listenLocal = true;
  /// The threads that run the links (shared with the actors); when null the
  /// transport makes and runs its own pool of one thread.
  std::shared_ptr<IoPool> pool;
};

/// The Boost.Asio transport: TCP between hosts, Unix domain sockets within
/// one. Listens at construction (ephemeral port, random abstract socket
/// name); throws BootstrapError naming the address when it cannot. A peer is
/// reached over its `local` socket when its Endpoint names one.
std::unique_ptr<Transport> makeAsioTransport(const AsioOptions& options);

/// The address this host should listen on: CROWN_ADDR if set, else the IPv4
/// address of CROWN_IFACE if set, else the first non-loopback IPv4 interface
/// address, else 127.0.0.1. Throws ConfigError for an unknown interface.
std::string chooseListenAddress();

}  // namespace crown::transport
