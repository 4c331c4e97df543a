#include "actor/router.h"

#include "crown/actor/failure.h"
#include "crown/common/trace.h"
#include "crown/wire/serialize.h"

namespace crown::detail {

using wire::Envelope;
using wire::MessageKind;

void Router::setRawAgent(std::uint64_t local, Proc::RawHandler handler) {
  rawAgents_[local] = std::move(handler);
}

void Router::route(transport::OutMessage message) {
  Rank to = message.envelope.dest.rank;
  if (to == rank_) {
    deliver(std::move(message.envelope), std::move(message.payload).join(), false);
    return;
  }
  if (to >= size_) {
    if (message.envelope.kind == MessageKind::kRequest) {
      requests_.fail(message.envelope.requestId,
                     std::make_exception_ptr(ConfigError("rank " + std::to_string(to) +
                                                         " does not exist (size " +
                                                         std::to_string(size_) + ")")));
    }
    return;
  }
  if (trace::on()) [[unlikely]] {
    trace::instant("send", message.envelope.type,
                   "to rank " + std::to_string(to) + ", " +
                       std::to_string(message.payload.size()) + " bytes");
  }
  transport_.send(to, std::move(message));
}

void Router::deliver(Envelope&& envelope, wire::Bytes&& payload, bool fromNetwork) {
  switch (envelope.kind) {
    case MessageKind::kReply:
    case MessageKind::kFailure:
      requests_.answer(std::move(envelope), std::move(payload));
      return;
    case MessageKind::kPortValue:  // to a port: an entry of the table (port.h)
    case MessageKind::kPortError:
    case MessageKind::kPortDrop:
    case MessageKind::kPortWatch:
      requests_.toPort(std::move(envelope), std::move(payload));
      return;
    case MessageKind::kHeartbeat:  // consumed by the transport; never reach here
    case MessageKind::kNotice:
      return;
    case MessageKind::kRequest:
    case MessageKind::kOneWay:
      break;
  }
  if (auto raw = rawAgents_.find(envelope.dest.local); raw != rawAgents_.end()) {
    raw->second(std::move(envelope), std::move(payload));
    return;
  }
  mailboxes_.enqueue(Delivery{std::move(envelope), std::move(payload), nullptr}, fromNetwork);
}

void Router::reply(const Envelope& request, MessageKind kind, std::string type,
                   wire::Payload payload) {
  Envelope envelope{kind, request.dest, request.sender, request.requestId, std::move(type)};
  if (tooLarge(envelope.dest.rank, payload.size())) {
    envelope.kind = MessageKind::kFailure;
    envelope.type = kRemoteFailureType;
    auto error = std::make_exception_ptr(
        MessageTooLarge("the reply to this call: " + limits_.refusal(payload.size())));
    payload = wire::toBytes(describeFailure(error, rank_));
  }
  route({std::move(envelope), std::move(payload)});
}

}  // namespace crown::detail
