// Router: where a message of one Proc goes. Out: to a local mailbox or raw
// agent when the destination is this rank, else to the transport. In: a
// reply ends its request (RequestTable), a port frame goes to its port (an
// entry of the RequestTable too: port.h), a message to a raw agent runs it
// on the delivering thread, any other goes to its actor's mailbox. Messages
// to actors are numbered for ORD-1 by the Proc; raw agents take theirs unnumbered.
// Thread-safe once started (the raw agents are fixed by then).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "actor/mailbox.h"
#include "actor/request_table.h"
#include "crown/transport/transport.h"
#include "crown/wire/frame.h"

namespace crown::detail {

class Router {
 public:
  Router(Rank rank, Rank size, transport::Transport& transport, RequestTable& requests,
         Mailboxes& mailboxes)
      : rank_(rank),
        size_(size),
        transport_(transport),
        requests_(requests),
        mailboxes_(mailboxes) {}

  /// Before the transport starts.
  void setRawAgent(std::uint64_t local, Proc::RawHandler handler);
  /// Raw agents take their messages unnumbered (ORD-1 is for actors).
  bool isRawAgent(std::uint64_t local) const { return rawAgents_.count(local) > 0; }
  void route(transport::OutMessage message);
  /// A pool thread that read it (fromNetwork), or the sender's thread (local).
  void deliver(wire::Envelope&& envelope, wire::Bytes&& payload, bool fromNetwork);
  /// FLO-1: a message to another rank over the frame limit, refused before it
  /// is numbered or sent (a receiver would close the link on it).
  bool tooLarge(Rank to, std::size_t payloadBytes) const {
    return to != rank_ && !limits_.allows(payloadBytes);
  }
  MessageTooLarge tooLargeError(Rank to, std::size_t payloadBytes) const {
    return MessageTooLarge("a message to rank " + std::to_string(to) + ": " +
                           limits_.refusal(payloadBytes));
  }
  /// Answers `request` with a reply or failure frame; a reply over the frame
  /// limit becomes a failure saying so (the caller's call fails, DLV-1).
  void reply(const wire::Envelope& request, wire::MessageKind kind, std::string type,
             wire::Payload payload);

 private:
  Rank rank_;
  Rank size_;
  transport::Transport& transport_;
  RequestTable& requests_;
  Mailboxes& mailboxes_;
  std::unordered_map<std::uint64_t, Proc::RawHandler> rawAgents_;
  wire::FrameLimits limits_ = wire::FrameLimits::fromEnv();
};

}  // namespace crown::detail
