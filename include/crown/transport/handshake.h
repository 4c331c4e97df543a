// The two sides of a link's handshake (auth.h) as state machines over its
// three messages: the link does the I/O (link_handshake.cpp), tests and the
// fuzzer feed them any bytes. Each step either returns what to send next or
// throws ProtocolError saying why the other side is refused (SEC-1). One
// object per connection attempt; not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "crown/transport/auth.h"

namespace crown::transport {

/// What a completed handshake gives the link.
struct LinkSession {
  Rank peer = 0;
  FabricSecurity security = FabricSecurity::kIntegrity;
  SessionKey sendKey{};     ///< seals the frames this side writes
  SessionKey receiveKey{};  ///< opens the frames this side reads
};

/// The connecting side: it meant to reach rank `server`.
class ClientHandshake {
 public:
  ClientHandshake(const Secret& secret, FabricSecurity security, Rank self, Rank server);

  /// The ClientAuth to send back. Throws ProtocolError when the bytes are no
  /// crown hello, come from another rank than `server`, or ask for another
  /// security setting.
  std::array<std::uint8_t, kClientAuthBytes> onHello(std::span<const std::uint8_t, kHelloBytes> bytes);
  /// Throws ProtocolError when the server did not prove it holds the secret
  /// on this very link.
  LinkSession onServerAuth(std::span<const std::uint8_t, kServerAuthBytes> bytes);

 private:
  enum class Step { kAwaitHello, kAwaitServerAuth, kDone };
  Secret secret_;
  LinkBinding link_;
  Step step_ = Step::kAwaitHello;
};

/// The accepting side, rank `self` of a job of `size` ranks.
class ServerHandshake {
 public:
  ServerHandshake(const Secret& secret, FabricSecurity security, Rank self, Rank size);

  /// The hello to send first; it carries a fresh nonce.
  std::array<std::uint8_t, kHelloBytes> hello() const;
  /// The ServerAuth to send, and the session in `session`. Throws
  /// ProtocolError when the client claims no rank of the job or did not
  /// prove it holds the secret for this link.
  std::array<std::uint8_t, kServerAuthBytes> onClientAuth(
      std::span<const std::uint8_t, kClientAuthBytes> bytes, LinkSession& session);

 private:
  Secret secret_;
  LinkBinding link_;
  Rank size_;
  bool done_ = false;
};

}  // namespace crown::transport
