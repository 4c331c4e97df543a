// The in-process transport: many simulated ranks ("virtual procs") in one
// process, sharing one IoPool, with the same Proc, agents and routing code as
// real ranks (SIM-1). A LocalHub connects them; frames to one rank are
// delivered in send order on that rank's strand, without serialization of
// the frame itself. Thread-safe.
#pragma once

#include <memory>

#include "crown/transport/transport.h"

namespace crown::transport {

class LocalHub;

/// A hub for ranks 0..size-1, delivering on `pool` (which the caller starts).
/// A payload over `limits` is handed back to its sender as a bad frame, as a
/// real link refuses it.
std::shared_ptr<LocalHub> makeLocalHub(std::shared_ptr<IoPool> pool, Rank size,
                                       wire::FrameLimits limits = {});

/// Rank `rank`'s transport on the hub.
std::unique_ptr<Transport> makeLocalTransport(const std::shared_ptr<LocalHub>& hub, Rank rank);

/// Simulates `rank` dropping out (a process killed, a cable cut): every other
/// rank is told it is lost, it is told every other rank is, and frames to or
/// from it fail from now on.
void disconnect(LocalHub& hub, Rank rank);

}  // namespace crown::transport
