// Proc::Impl: the parts of a Proc (mailboxes, request table, router, flow
// control, ports, modules) and how they are wired to each other. Private to
// the Proc's own files: proc.cpp (the facade and messaging) and
// proc_actors.cpp (its hosted actors).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_set>

#include "actor/flow_control.h"
#include "actor/mailbox.h"
#include "actor/port_hub.h"
#include "actor/request_table.h"
#include "actor/router.h"
#include "actor/running_actor.h"
#include "actor/send_sequencer.h"
#include "crown/actor/failure.h"
#include "crown/actor/lost_messages.h"
#include "crown/actor/module.h"
#include "crown/actor/proc.h"
#include "crown/common/log.h"

namespace crown {

struct Proc::Impl {
  Options options;
  std::unique_ptr<transport::Transport> transport;
  detail::SendSequencer sequencer;
  detail::RequestTable requests;
  detail::FlowControl flow;
  detail::Mailboxes mailboxes;
  detail::Router router;
  std::shared_ptr<detail::PortHub> ports;  // port.h: shared with receivers and handles
  std::vector<std::unique_ptr<Module>> owned;
  std::vector<Module*> modules;
  std::atomic<std::uint64_t> nextLocal{kFirstActorLocalId};
  bool installing = true;  // raw agents may be set only while modules install
  std::atomic<bool> stopped{false};
  std::mutex lostHookMutex;
  mutable std::mutex lostPeersMutex;
  std::unordered_set<Rank> lostPeers;       // each reported once: by a link, or by declareLost
  std::unordered_set<Rank> departingPeers;  // expectDeparture: their loss is no failure
  std::function<void(const LostMessages&)> lostHook;
  mutable std::mutex joinedHostsMutex;
  std::map<Rank, std::string> joinedHosts;  // a node map: host() hands out references

  Impl(Proc& proc, Options opts, std::unique_ptr<transport::Transport> t)
      : options(std::move(opts)),
        transport(std::move(t)),
        sequencer(options.size),
        requests(options.size, options.launched == 0 ? options.size : options.launched,
                 options.rank),
        flow(
            detail::FlowLimits::fromEnv(),
            [this](const detail::Credit& credit) { toFlowAgent(credit.sender.rank, credit); },
            [this](const detail::CreditRequest& ask) { toFlowAgent(ask.dest.rank, ask); },
            [this](Rank rank) { return requests.alive(rank); }),
        mailboxes(
            proc, options.pool,
            [this](const wire::Envelope& request, wire::MessageKind kind, std::string type,
                   wire::Payload payload) {
              router.reply(request, kind, std::move(type), std::move(payload));
            },
            flow),
        router(options.rank, options.size, *transport, requests, mailboxes),
        ports(std::make_shared<detail::PortHub>(
            options.rank, requests, flow, router, [this] { return senderId(); },
            [this, self = &proc](Rank rank) {
              return requests.exists(rank)
                         ? lostError(*self, rank, "lost earlier")
                         : std::make_exception_ptr(ConfigError("rank " + std::to_string(rank) +
                                                               " does not exist (a vacant slot)"));
            })) {}

  ActorId senderId() const {
    Actor* actor = detail::runningActor();
    return actor ? actor->id() : ActorId{options.rank, 0};
  }

  template <class Message>
  void toFlowAgent(Rank rank, const Message& message) {
    wire::Envelope envelope{wire::MessageKind::kOneWay,
                            {options.rank, kFlowAgentLocalId},
                            {rank, kFlowAgentLocalId},
                            0,
                            wire::messageName<Message>()};
    router.route({std::move(envelope), wire::toBytes(message)});
  }

  // The flow agent's messages, on the thread that read them (never a
  // mailbox: a pool whose threads all wait for credit must still take one).
  void onFlowMessage(const wire::Envelope& envelope, const wire::Bytes& payload) {
    if (envelope.type == wire::messageName<detail::Credit>()) {
      flow.credited(wire::fromBytes<detail::Credit>(payload));
    } else if (envelope.type == wire::messageName<detail::CreditRequest>()) {
      flow.requested(wire::fromBytes<detail::CreditRequest>(payload));
    } else {
      log::get().error("the flow agent takes no {}", envelope.type);
    }
  }

  // Numbers a message to an actor for ORD-1, once its window has room
  // (FLO-1); raw agents take theirs unnumbered and uncounted. An actor's
  // message to itself from its own handler never waits: its mailbox cannot
  // drain before the handler returns.
  void admit(wire::Envelope& envelope, std::size_t payloadBytes) {
    if (router.isRawAgent(envelope.dest.local)) return;
    waitForRoom(envelope.sender, envelope.dest, payloadBytes);
    envelope.seq = sequencer.next(envelope.sender, envelope.dest);
    flow.sent(envelope.sender, envelope.dest, envelope.seq, payloadBytes);
  }

  void waitForRoom(const ActorId& sender, const ActorId& dest, std::size_t payloadBytes) {
    Actor* running = detail::runningActor();
    if (running != nullptr && running->id() == dest) return;
    flow.waitForRoom(sender, dest, payloadBytes);
  }

  std::exception_ptr lostError(Proc& proc, Rank rank, const std::string& reason) const {
    return std::make_exception_ptr(ProcessLost(rank, proc.host(rank), reason));
  }

  // DLV-1 tells a dead peer from a link closed over a bad frame, whose peer
  // is alive: only the first is ProcessLost.
  std::exception_ptr sendError(Proc& proc, Rank to, const transport::LinkError& error) const {
    if (error.peerLost()) return lostError(proc, to, error.toString());
    return std::make_exception_ptr(ProtocolError(
        "a message to rank " + std::to_string(to) + " was not delivered (" + error.toString() +
        "); rank " + std::to_string(to) + " is not lost: later messages open a new link"));
  }

  // The proc agent's thread: a member's report of messages from here it gave up.
  void onLostMessages(const LostMessages& lost) {
    log::get().error("{}", toString(lost));
    std::function<void(const LostMessages&)> hook;
    {
      std::lock_guard lock(lostHookMutex);
      hook = lostHook;
    }
    if (hook) hook(lost);
  }

  // A pool thread, on a link's strand.
  void onPeerLost(Proc& proc, Rank peer, const std::string& reason) {
    {
      std::lock_guard lock(lostPeersMutex);
      if (!lostPeers.insert(peer).second) return;
    }
    log::get().debug("link to rank {} lost: {}", peer, reason);
    auto error = lostError(proc, peer, reason);
    for (auto& complete : requests.markLost(peer)) complete(detail::Outcome{error, {}, {}});
    ports->peerLost(peer, error);
    flow.peerLost(peer);
    for (Module* module : modules) module->peerLost(peer, reason);
  }
};

}  // namespace crown
