// The shared-memory backend (issue 14, CROWN_SAME_HOST_TRANSPORT=shm, the default): a
// Backend for the peers of this host, whose frames go through rings
// (ring.h) instead of sockets. A link is one way: the first frame to a peer
// connects to its abstract Unix socket, authenticates with the fabric's
// handshake (handshake.h, SEC-1), makes a ring and passes it over the
// socket (SCM_RIGHTS). The socket stays open as the link's sign of life: a
// peer's process that ends closes it, and the link is lost at once.
//
// Each record is [u32 envelope bytes][envelope][payload]. The bytes never
// leave the two processes' memory, so they are not sealed
// (CROWN_FABRIC_SECURITY protects what crosses a network); the handshake
// still decides who may write into a ring.
//
// Heartbeats go over the sockets, one byte each way per interval, so a
// stopped or hung peer (whose sockets stay open) is lost after
// heartbeatInterval x heartbeatMisses, as over the Asio links; lastHeard is
// its latest record or heartbeat byte.
#pragma once

#include <memory>

#include "crown/transport/transport.h"

namespace crown::transport::shm {

/// Listens at once; throws BootstrapError when it cannot.
std::unique_ptr<Backend> makeShmBackend(const AsioOptions& options);

}  // namespace crown::transport::shm
