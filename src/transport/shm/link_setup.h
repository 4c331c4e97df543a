// How a shared-memory link comes up (shm_backend.h): the writer connects to
// the reader's abstract Unix socket, both run the fabric's handshake
// (handshake.h, SEC-1), and only then does the writer make the ring and pass
// it over the socket (SCM_RIGHTS). Both halves are bounded by the auth
// timeout and leave the socket blocking, without timeouts, when they succeed.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "crown/transport/transport.h"
#include "transport/shm/ring.h"

namespace crown::transport::shm {

struct OpenedLink {
  int socket = -1;
  Ring ring;
};

/// The writer's half, to rank `to` listening at `name` (its socket's).
std::variant<OpenedLink, LinkError> openLink(const std::string& name, Rank to,
                                             std::size_t ringBytes, const AsioOptions& options);

struct AcceptedLink {
  Rank peer = 0;
  Ring ring;
};

/// The reader's half, on an accepted socket; nullopt when the peer failed
/// the handshake (logged, and the socket shut).
std::optional<AcceptedLink> acceptLink(int socket, const AsioOptions& options);

}  // namespace crown::transport::shm
