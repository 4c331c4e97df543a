// LinkError: why a link failed, as a copyable value (tensorpipe's Error)
// that transports hand to their callbacks instead of throwing across the io
// loop, so the layers above can tell a dead peer from a bad frame. Any thread.
#pragma once

#include <cstdint>
#include <string>

namespace crown::transport {

struct LinkError {
  enum class Kind : std::uint8_t {
    kClosed,      ///< the peer closed the connection (its process ended)
    kReset,       ///< the connection broke (reset, broken pipe, unreachable network)
    kRefused,     ///< nobody listens at the peer's address
    kTimeout,     ///< connecting, or the peer's heartbeats, took too long
    kAuthFailed,  ///< the peer could not prove it holds the job secret
    kBadFrame,    ///< a frame broke the protocol: that link is closed, the peer lives on
    kLocalResource,  ///< this process ran out of something (file descriptors, memory)
  };

  Kind kind = Kind::kClosed;
  std::string message;  ///< what happened, for people

  /// True when the peer's process should be taken as lost (DLV-1: its
  /// requests fail with ProcessLost); false for a link closed over a bad
  /// frame, whose peer is alive and reachable again on a new link, and for
  /// a local shortage, which says nothing about the peer.
  bool peerLost() const { return kind != Kind::kBadFrame && kind != Kind::kLocalResource; }
  /// "refused: cannot connect to ...".
  std::string toString() const;
};

const char* toString(LinkError::Kind kind);

}  // namespace crown::transport
