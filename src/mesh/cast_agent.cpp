#include "mesh/cast_agent.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <unordered_map>

#include "crown/actor/failure.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/common/trace.h"
#include "crown/mesh/cast.h"
#include "crown/mesh/cast_tree.h"
#include "mesh/aggregation.h"
#include "mesh/cast_message.h"
#include "mesh/resend_window.h"

namespace crown::mesh::detail {

namespace {

using crown::detail::Outcome;
using wire::Envelope;
using wire::MessageKind;

const std::string kCastMessageType = wire::messageName<CastMessage>();
const std::string kCastPartialType = wire::messageName<CastPartial>();
const std::string kCastResultType = wire::messageName<CastResult>();

}  // namespace

struct CastAgent::Impl {
  Impl(Proc& proc, std::uint64_t agentId)
      : proc_(proc),
        agentId_(agentId),
        window_(env::integer("CROWN_CAST_RESEND_WINDOW", 256, 0, 1 << 20),
                env::integer("CROWN_CAST_RESEND_WINDOW_BYTES", 16 << 20, 0, std::int64_t{1} << 40)) {}

  void onMessage(Envelope&& envelope, wire::Bytes&& bytes) {
    try {
      if (envelope.type == kCastMessageType) return onCast(envelope, std::move(bytes));
      if (envelope.type == kCastPartialType) return onPartial(envelope.sender.rank, bytes);
      throw ProtocolError("the cast agent takes no " + envelope.type);
    } catch (...) {
      if (envelope.kind == MessageKind::kRequest) {
        proc_.replyFailure(envelope, std::current_exception());
      } else {
        try {
          throw;
        } catch (const std::exception& e) {
          log::get().error("cast agent on rank {} dropped a {}: {}", proc_.rank(), envelope.type,
                           e.what());
        }
      }
    }
  }

  void castFrom(CastRequest request, std::function<void(CastResult&&)> done,
                std::function<void(CastEntry&&)> onEntry) {
    if (request.fanout == 0) throw ConfigError("a cast needs a fan-out of at least 1");
    std::vector<std::size_t> members = request.slice.ranks();
    for (std::size_t rank : members) {
      if (rank >= proc_.size()) {
        throw ConfigError("cannot cast to rank " + std::to_string(rank) + ": the job has " +
                          std::to_string(proc_.size()) + " ranks");
      }
    }
    // Before any sequence number is reserved: a refused cast leaves no gap.
    auto remote = std::find_if(members.begin(), members.end(),
                               [&](std::size_t rank) { return rank != proc_.rank(); });
    if (remote != members.end()) {
      proc_.checkSendable(static_cast<Rank>(*remote), request.payload.size());
    }
    auto tree = std::make_shared<const CastTree>(request.slice, request.fanout);
    ActorId origin = proc_.currentSender();
    std::vector<std::uint64_t> seqs =
        proc_.reserveSeqs(origin, request.destLocal, members, request.payload.size());
    CastMessage message{origin,
                        nextCastId_.fetch_add(1),
                        std::move(request.slice),
                        static_cast<std::uint32_t>(request.fanout),
                        request.destLocal,
                        detail::encodeRuns(seqs),
                        static_cast<std::uint8_t>(request.mode),
                        std::move(request.reducer),
                        std::move(request.type),
                        std::move(request.payload)};
    wire::Bytes bytes = wire::toBytes(message);
    Targets targets = aroundLost(tree->rootChildren(), *tree);
    trace::Span span;
    if (trace::on()) [[unlikely]] {
      span.begin("cast", "cast " + message.type,
                 std::to_string(members.size()) + " members, fan-out " +
                     std::to_string(request.fanout));
      traceHops(proc_.rank(), message.castId, targets.live);
    }
    if (request.mode == CastMode::kBroadcast) {
      broadcast(targets, {std::make_shared<const wire::Bytes>(std::move(bytes)), tree});
      return;
    }
    auto aggregation = makeAggregation(request.mode, message.reducer, targets.parts(),
                                       targets.live, {proc_.rank(), message.castId}, rootStreams_,
                                       std::move(done), std::move(onEntry));
    forward(targets, tree, bytes, aggregation);
  }

  using StreamKey = std::pair<Rank, std::uint64_t>;  // origin rank, cast id
  // A stream's aggregation, and the ranks it sent the cast to: the only
  // ones whose entries it takes.
  struct RunningStream {
    std::weak_ptr<Aggregation> aggregation;
    std::vector<std::size_t> children;
  };
  using Streams = std::map<StreamKey, RunningStream>;

  // Whom a hop sends to: its children, except that the children of a child
  // already known to be lost are adopted (and so on down), so a dead rank
  // costs the casts after its death only its own entry, not its subtree's.
  struct Targets {
    std::vector<std::size_t> live;
    std::vector<std::size_t> lost;
    std::size_t parts() const { return live.size() + lost.size(); }
  };

  Targets aroundLost(std::vector<std::size_t> children, const CastTree& tree) const {
    Targets targets;
    while (!children.empty()) {
      std::size_t child = children.back();
      children.pop_back();
      if (proc_.alive(static_cast<Rank>(child))) {
        targets.live.push_back(child);
      } else {
        targets.lost.push_back(child);
        for (std::size_t grandchild : tree.children(child)) children.push_back(grandchild);
      }
    }
    return targets;
  }

  // A flow from this hop to each child it sends the cast to (the child's
  // hop ends it, under the same id).
  static void traceHops(Rank origin, std::uint64_t castId, const std::vector<std::size_t>& children) {
    for (std::size_t child : children) trace::flowStart("cast", trace::flowId(origin, castId, child));
  }

  ActorId agentOn(std::size_t rank) const { return ActorId{static_cast<Rank>(rank), agentId_}; }

  void onCast(const Envelope& envelope, wire::Bytes&& bytes) {
    Rank here = proc_.rank();
    ReceivedCast cast = decodeCast(bytes, here, proc_.size());
    CastMessage& message = cast.message;
    CastMode mode = cast.mode;
    const std::shared_ptr<const CastTree>& tree = cast.tree;
    Targets targets = aroundLost(tree->children(here), *tree);
    trace::Span span;
    if (trace::on()) [[unlikely]] {
      span.begin("cast", "cast hop " + message.type, "from rank " +
                                                         std::to_string(envelope.sender.rank));
      trace::flowEnd("cast", trace::flowId(message.origin.rank, message.castId, here));
      traceHops(message.origin.rank, message.castId, targets.live);
    }
    Envelope local{MessageKind::kOneWay, message.origin, {here, message.destLocal}, 0,
                   std::move(message.type), cast.seq};

    if (mode == CastMode::kBroadcast) {
      broadcast(targets, {std::make_shared<const wire::Bytes>(std::move(bytes)), tree});
      proc_.deliverLocal(std::move(local), std::move(message.payload), nullptr);
      return;
    }
    local.kind = MessageKind::kRequest;
    if (mode != CastMode::kStream && targets.live.empty() && targets.lost.empty()) {
      // A leaf's answer is its member's alone: no aggregation kept while
      // the member runs (most hops of a tree are leaves; at 16,384 procs
      // their aggregations cost a third of a cast).
      proc_.deliverLocal(std::move(local), std::move(message.payload),
                         [this, parent = envelope, here, mode,
                          reducer = std::move(message.reducer)](Outcome&& outcome) {
                           answer(parent, Aggregation::alone(
                                              mode, reducer,
                                              detail::entryFor(here, std::move(outcome))));
                         });
      return;
    }
    // Answer the parent once the subtree is complete; in stream mode relay
    // each entry to the parent as it comes.
    Envelope parent = envelope;
    std::function<void(CastEntry&&)> relayUp;
    if (mode == CastMode::kStream) {
      relayUp = [this, to = parent.sender.rank, origin = message.origin.rank,
                 castId = message.castId](CastEntry&& entry) {
        proc_.sendRaw(agentOn(to), kCastPartialType,
                      wire::toBytes(CastPartial{origin, castId, std::move(entry)}));
      };
    }
    auto aggregation = makeAggregation(
        mode, message.reducer, targets.parts() + 1, targets.live,
        {message.origin.rank, message.castId}, memberStreams_,
        [this, parent = std::move(parent)](CastResult&& result) {
          answer(parent, std::move(result));
        },
        std::move(relayUp));
    forward(targets, tree, bytes, aggregation);
    proc_.deliverLocal(std::move(local), std::move(message.payload),
                       [aggregation, here](Outcome&& outcome) {
                         aggregation->member(detail::entryFor(here, std::move(outcome)));
                       });
  }

  // A hop's result to its parent, encoded into a buffer of the size its
  // columns need.
  void answer(const Envelope& parent, const CastResult& result) {
    std::size_t size =
        wire::kEncodeReserveBytes + result.entries.encodedBytes() + result.value.size();
    proc_.reply(parent, kCastResultType, wire::toBytes(result, size));
  }

  // A broadcast has no answers to tell a hop's loss by, so each one sent is
  // kept in the child's window, and resent around the child once it is
  // known lost (resendAround). Checked after sending: a child lost
  // meanwhile, whose window was taken before this one went in, is resent
  // here (a copy too many is dropped as a duplicate, ORD-1).
  void broadcast(const Targets& targets, const ResendWindow::Sent& sent) {
    for (std::size_t child : targets.live) {
      window_.record(child, sent);
      proc_.sendRaw(agentOn(child), kCastMessageType, *sent.bytes);
      if (!proc_.alive(static_cast<Rank>(child))) resendAround(child);
    }
  }

  // `lost` may have died before forwarding what it was sent: send the
  // broadcasts of its window again to its children, adopted as aroundLost
  // does (and recorded in their windows in turn), so members get at once
  // what they would otherwise give up after the gap timeout (DLV-1).
  void resendAround(std::size_t lost) {
    if (stopping_) return;
    std::vector<ResendWindow::Sent> window = window_.take(lost);
    if (window.empty()) return;
    log::get().info("rank {} lost: resending the last {} broadcasts sent to it to its children",
                    lost, window.size());
    for (const ResendWindow::Sent& sent : window) {
      broadcast(aroundLost(sent.tree->children(lost), *sent.tree), sent);
    }
  }

  void forward(const Targets& targets, const std::shared_ptr<const CastTree>& tree,
               const wire::Bytes& bytes, const std::shared_ptr<Aggregation>& aggregation) {
    for (std::size_t lost : targets.lost) {
      auto rank = static_cast<Rank>(lost);
      aggregation->member(detail::failureEntry(
          rank, std::make_exception_ptr(
                    ProcessLost(rank, proc_.host(rank), "lost before this cast was sent"))));
    }
    for (std::size_t child : targets.live) {
      proc_.requestRaw(agentOn(child), kCastMessageType, bytes,
                       [aggregation, tree, child](Outcome&& outcome) {
                         if (!outcome.error && outcome.type != kCastResultType) {
                           outcome.error = std::make_exception_ptr(
                               ProtocolError("a cast hop answered with " + outcome.type));
                         }
                         if (!outcome.error) {
                           try {
                             return aggregation->child(
                                 wire::fromBytes<CastResult>(outcome.payload), *tree, child);
                           } catch (...) {
                             outcome.error = std::current_exception();
                           }
                         }
                         aggregation->childLost(tree->subtree(child), outcome.error);
                       });
    }
  }

  // Stream aggregations are findable by key while they run, for the
  // partial entries their children (the live targets) relay.
  std::shared_ptr<Aggregation> makeAggregation(CastMode mode, const std::string& reducer,
                                               std::size_t parts,
                                               const std::vector<std::size_t>& children,
                                               StreamKey key, Streams& streams,
                                               std::function<void(CastResult&&)> done,
                                               std::function<void(CastEntry&&)> onEntry) {
    if (mode != CastMode::kStream) {
      return std::make_shared<Aggregation>(mode, reducer, parts, std::move(done),
                                           std::move(onEntry));
    }
    auto finish = [this, key, &streams, done = std::move(done)](CastResult&& result) {
      {
        std::lock_guard lock(streamsMutex_);
        streams.erase(key);
      }
      if (done) done(std::move(result));
    };
    auto aggregation =
        std::make_shared<Aggregation>(mode, reducer, parts, std::move(finish), std::move(onEntry));
    std::lock_guard lock(streamsMutex_);
    streams[key] = RunningStream{aggregation, children};
    return aggregation;
  }

  void onPartial(Rank sender, const wire::Bytes& bytes) {
    auto partial = wire::fromBytes<CastPartial>(bytes);
    std::shared_ptr<Aggregation> aggregation;
    {
      std::lock_guard lock(streamsMutex_);
      // The origin's rank holds both the cast's root and a member hop with
      // the same key. The entry is the sender's parent's alone: the other
      // would not count it as relayed, and fail it a second time if the
      // sender's hop died (DLV-1: each member has one entry).
      StreamKey key{partial.originRank, partial.castId};
      for (Streams* streams : {&rootStreams_, &memberStreams_}) {
        auto it = streams->find(key);
        if (it == streams->end()) continue;
        const auto& children = it->second.children;
        if (std::find(children.begin(), children.end(), sender) == children.end()) continue;
        aggregation = it->second.aggregation.lock();
        break;
      }
    }
    if (!aggregation) throw ProtocolError("a stream entry for a cast that is not running here");
    aggregation->relay(std::move(partial.entry));
  }

  Proc& proc_;
  std::uint64_t agentId_;
  ResendWindow window_;
  std::atomic<bool> stopping_{false};  // links lost from here on are expected: resend nothing
  std::atomic<std::uint64_t> nextCastId_{1};
  std::mutex streamsMutex_;
  Streams rootStreams_;    // casts sent from here
  Streams memberStreams_;  // casts this rank is a member of
};

CastAgent::CastAgent(Proc& proc, std::uint64_t agentId)
    : impl_(std::make_unique<Impl>(proc, agentId)) {}

CastAgent::~CastAgent() = default;

void CastAgent::onMessage(Envelope&& envelope, wire::Bytes&& bytes) {
  impl_->onMessage(std::move(envelope), std::move(bytes));
}

void CastAgent::peerLost(Rank peer) { impl_->resendAround(peer); }

void CastAgent::stop() { impl_->stopping_ = true; }

void CastAgent::castFrom(CastRequest request, std::function<void(CastResult&&)> done,
                         std::function<void(CastEntry&&)> onEntry) {
  impl_->castFrom(std::move(request), std::move(done), std::move(onEntry));
}

}  // namespace crown::mesh::detail
