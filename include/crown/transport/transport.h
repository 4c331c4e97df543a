// A Transport moves frames between the ranks of one job. Its links run on an
// IoPool; callbacks run on the pool's threads and may hand work to the pool.
// send() may be called from any thread; frames from one thread to one peer
// arrive in the order they were sent (the transport's half of ORD-1).
//
// Failures are values, never exceptions across the io loop: a frame that
// cannot be delivered is handed back through onSendFailed, and a peer whose
// link dies is reported once through onPeerLost, each with a LinkError that
// says why (DLV-1 builds on both).
//
// Every rank's address is opaque bytes that only its transport reads (as
// gloo's mpi/context.cc exchanges them over MPI): bootstrap gathers them and
// hands each transport everyone's. The fabric of a real job is a routing
// transport over backends, which picks one backend per peer: Unix sockets
// within a host, TCP between hosts (design.md, "Layers").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "crown/common/error.h"
#include "crown/transport/auth.h"
#include "crown/transport/error.h"
#include "crown/transport/io_pool.h"
#include "crown/wire/envelope.h"
#include "crown/wire/frame.h"
#include "crown/wire/payload.h"

namespace crown::transport {

/// One message: where it goes and what it carries.
struct OutMessage {
  wire::Envelope envelope;
  wire::Payload payload;
};

struct TransportCallbacks {
  /// A frame arrived from an authenticated peer; its payload in one buffer.
  std::function<void(Rank from, wire::Envelope&&, wire::Bytes&&)> onMessage;
  /// A frame could not be delivered; the message is handed back.
  std::function<void(Rank to, OutMessage&&, const LinkError&)> onSendFailed;
  /// The link to a peer died with error.peerLost(). Reported once per peer.
  std::function<void(Rank peer, const LinkError&)> onPeerLost;
};

class Transport {
 public:
  virtual ~Transport() = default;

  /// Where this rank listens, as opaque bytes for its peers; valid from construction.
  virtual std::string address() const = 0;
  /// Every rank's address (as address() gave it), indexed by rank, then start serving.
  virtual void start(std::vector<std::string> peers, TransportCallbacks callbacks) = 0;
  /// A rank that joined after start (a replacement, respawned): `address`
  /// (as its address() gave it) becomes where it listens. Until then frames
  /// to that rank are refused. Throws ConfigError when no backend reaches it
  /// or this transport cannot admit ranks.
  virtual void admit(Rank rank, const std::string& address) {
    (void)address;
    throw ConfigError("this transport cannot admit rank " + std::to_string(rank) +
                      " after it started");
  }
  /// Queues one frame to a peer (opening the link on first use).
  virtual void send(Rank to, OutMessage message) = 0;
  /// Flushes what is queued (for at most `flushTimeout`), then closes every link.
  virtual void stop(std::chrono::milliseconds flushTimeout) = 0;
  /// This process is dying (an exit, a fatal signal): tells every peer with
  /// an open link how (`lastWords`, "killed by SIGSEGV"), waiting at most
  /// `bound` for the notices to be written. A peer then names the cause when
  /// it reports this rank lost. Any thread but a link's; best effort.
  virtual void depart(const std::string& lastWords, std::chrono::milliseconds bound) {
    (void)lastWords;
    (void)bound;
  }
  /// When this rank last read bytes from `peer` (a frame or a heartbeat) on
  /// a live link: how fresh its sign of life is, for status views (crown
  /// status). nullopt when there is no live link to that peer (this rank
  /// itself included) or the transport keeps no such time. Any thread.
  virtual std::optional<std::chrono::steady_clock::time_point> lastHeard(Rank peer) const {
    (void)peer;
    return std::nullopt;
  }
};

/// One way of reaching peers, under a routing transport.
class Backend : public Transport {
 public:
  /// "tcp", "unix", ...: names its part of a rank's address.
  virtual std::string name() const = 0;
  /// Whether this backend reaches the peer listening at `address` (its own
  /// kind of address): a Unix socket only reaches the same host.
  virtual bool reaches(const std::string& address) const = 0;
  /// `address` for people: "10.0.0.2:4242", "@crown-1f2e-3".
  virtual std::string describe(const std::string& address) const = 0;
};

/// A rank's address under a routing transport: its backends' names and
/// addresses, in the order of preference.
using Addresses = std::vector<std::pair<std::string, std::string>>;
std::string encodeAddresses(const Addresses& addresses);
/// Throws ProtocolError when `bytes` are not an encodeAddresses() result.
Addresses decodeAddresses(const std::string& bytes);

/// Routes each peer to the first of `backends` that reaches it (ORD-1: one
/// backend per peer, so one stream carries everything to it). A peer no
/// backend reaches is unreachable: frames to it are handed back, refused.
std::unique_ptr<Transport> makeRoutingTransport(std::vector<std::unique_ptr<Backend>> backends,
                                                Rank rank, Rank size);

struct AsioOptions {
  Rank rank = 0;
  Rank size = 1;
  std::string bindAddress;  ///< numeric IPv4/IPv6 address to listen on (TCP)
  /// This rank's host (MPI processor name): a Unix backend reaches the
  /// peers whose addresses name the same host.
  std::string host;
  Secret secret{};
  /// What protects frames after the handshake (CROWN_FABRIC_SECURITY); every
  /// rank of a job must use the same.
  FabricSecurity security = FabricSecurity::kIntegrity;
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
  /// Ranks on this host exchange frames through shared-memory rings
  /// (CROWN_SAME_HOST_TRANSPORT=shm, the runtime's default;
  /// src/transport/shm/shm_backend.h).
  bool sharedMemory = false;
  /// The threads that run the links (shared with the actors); when null the
  /// transport makes and runs its own pool of one thread.
  std::shared_ptr<IoPool> pool;
};

/// The Boost.Asio backends: TCP (listens on an ephemeral port of
/// bindAddress) and abstract Unix domain sockets (random name). Both listen
/// at construction and throw BootstrapError naming the address when they cannot.
std::unique_ptr<Backend> makeTcpBackend(const AsioOptions& options);
std::unique_ptr<Backend> makeUnixBackend(const AsioOptions& options);

/// The fabric of a real rank: a routing transport over the shared-memory
/// backend (when options.sharedMemory), the Unix backend (when
/// options.listenLocal and it can listen) and the TCP backend.
std::unique_ptr<Transport> makeAsioTransport(const AsioOptions& options);

/// The address this host should listen on: CROWN_ADDR if set, else the IPv4
/// address of CROWN_IFACE if set, else the first non-loopback IPv4 interface
/// address, else 127.0.0.1. Throws ConfigError for an unknown interface.
std::string chooseListenAddress();

}  // namespace crown::transport
