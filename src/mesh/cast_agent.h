// CastAgent: the raw agent of the mesh module on every proc, real or
// simulated (SIM-1: the same code for both; design.md, "Casting"). It starts
// casts from this proc, and forwards a cast it receives to its children
// before handing it to its own actor, so a slow actor never delays the rest
// of the tree; it answers its parent when its subtree is complete (DLV-1
// via Aggregation). A broadcast has no answer: it keeps what it sent to each
// child and resends that around the child when it is lost (resend_window.h).
// Thread-safe; never throws from onMessage.
#pragma once

#include <functional>
#include <memory>

#include "crown/mesh/cast.h"

namespace crown::mesh::detail {

class CastAgent {
 public:
  /// `agentId`: its own local id, which its peers on every proc share.
  CastAgent(Proc& proc, std::uint64_t agentId);
  ~CastAgent();

  /// A pool thread (the one that read the message), or a sender's thread
  /// for a cast to its own rank. Errors go back as values.
  void onMessage(wire::Envelope&& envelope, wire::Bytes&& bytes);
  /// Sends a cast from the calling actor (cast.h).
  void castFrom(CastRequest request, std::function<void(CastResult&&)> done,
                std::function<void(CastEntry&&)> onEntry);
  /// Rank `peer` was lost: resends around it the broadcasts it was sent.
  void peerLost(Rank peer);
  /// The proc is stopping: resends nothing more.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crown::mesh::detail
