#include "transport/shm/record.h"

#include <cstdint>
#include <cstring>

#include "crown/common/error.h"
#include "transport/shm/lending.h"

namespace crown::transport::shm {

std::vector<std::span<const std::byte>> recordParts(const OutMessage& message, std::string& head) {
  head.assign(4 + wire::encodedSize(message.envelope), '\0');
  auto envelopeBytes = static_cast<std::uint32_t>(head.size() - 4);
  std::memcpy(head.data(), &envelopeBytes, 4);
  wire::encodeEnvelope(message.envelope, reinterpret_cast<std::byte*>(head.data() + 4));
  std::vector<std::span<const std::byte>> parts;
  parts.reserve(2 + message.payload.segments().size());
  parts.push_back(std::as_bytes(std::span(head)));
  parts.push_back(std::as_bytes(std::span(message.payload.head())));
  for (const auto& segment : message.payload.segments()) {
    parts.push_back(std::as_bytes(std::span(segment.data, segment.size)));
  }
  return parts;
}

namespace {

// Records up to this size are taken whole, in one pass over the ring (each
// take moves the tail, a cache line the writer reads): most messages are
// this small, and moving their payload down over the envelope costs less.
constexpr std::uint64_t kWholeRecordBytes = 64 * 1024;

// The bytes after the envelope in a record of `length` bytes whose envelope
// has `envelopeBytes`; throws ProtocolError when either breaks the format.
std::uint64_t restBytesOf(std::uint32_t envelopeBytes, std::uint64_t length,
                          std::uint32_t maxEnvelopeBytes) {
  if (envelopeBytes > maxEnvelopeBytes || 4 + std::uint64_t{envelopeBytes} > length) {
    throw ProtocolError("an envelope of " + std::to_string(envelopeBytes) + " bytes");
  }
  return length - 4 - envelopeBytes;
}

// The payload's size in such a record, which holds it: throws ProtocolError
// also when it breaks `limits`.
std::uint64_t payloadBytesOf(std::uint32_t envelopeBytes, std::uint64_t length,
                             const wire::FrameLimits& limits) {
  std::uint64_t payloadBytes = restBytesOf(envelopeBytes, length, limits.maxEnvelopeBytes);
  if (!limits.allows(payloadBytes)) throw ProtocolError(limits.refusal(payloadBytes));
  return payloadBytes;
}

}  // namespace

Ring::Result writeFrame(Ring& ring, const OutMessage& message,
                        std::chrono::steady_clock::time_point deadline) {
  std::string head;
  if (lends(message) && !ring.lendingRefused()) {
    Ring::Result written = ring.write(lentRecordParts(message, head), deadline);
    if (written == Ring::Result::kDone) written = ring.awaitReturn(deadline);
    if (written != Ring::Result::kDone || !ring.lendingRefused()) return written;
  }
  return ring.write(recordParts(message, head), deadline);
}

Taken readFrame(Ring& ring, std::uint64_t length, const wire::FrameLimits& limits, pid_t lender,
                Frame& frame) {
  if (length < 4) throw ProtocolError("a record shorter than its header");
  // Records up to kWholeRecordBytes are taken in one pass; a larger one's
  // header and envelope first, so that its limits are checked before a
  // buffer for the rest is made.
  std::string record;
  std::uint32_t word = 0;
  if (length <= kWholeRecordBytes) {
    record.resize(length);
    if (!ring.take(std::as_writable_bytes(std::span(record)))) return Taken::kClosed;
    std::memcpy(&word, record.data(), 4);
  } else if (!ring.take(std::as_writable_bytes(std::span(&word, 1)))) {
    return Taken::kClosed;
  }
  bool lent = (word & kLentBit) != 0;
  std::uint32_t envelopeBytes = word & ~kLentBit;
  std::uint64_t restBytes = lent ? restBytesOf(envelopeBytes, length, limits.maxEnvelopeBytes)
                                 : payloadBytesOf(envelopeBytes, length, limits);
  if (lent && restBytes > kMaxDescriptorBytes) {
    throw ProtocolError("a lent payload's descriptor of " + std::to_string(restBytes) + " bytes");
  }
  std::vector<std::byte> envelope;
  const std::byte* envelopeAt = reinterpret_cast<const std::byte*>(record.data() + 4);
  if (record.empty()) {
    envelope.resize(envelopeBytes);
    if (!ring.take(envelope)) return Taken::kClosed;
    envelopeAt = envelope.data();
  }
  frame.envelope = wire::decodeEnvelope(envelopeAt, envelopeBytes);
  // What follows the envelope: the payload, or the descriptor of a lent one.
  wire::Bytes rest;
  if (!record.empty()) {
    record.erase(0, 4 + std::size_t{envelopeBytes});
    rest = std::move(record);
  } else {
    wire::sizeForOverwrite(rest, restBytes);
    if (!ring.take(std::as_writable_bytes(std::span(rest)))) return Taken::kClosed;
  }
  if (!lent) {
    frame.payload = std::move(rest);
    return Taken::kFrame;
  }
  std::optional<wire::Bytes> payload = copyLent(lender, std::as_bytes(std::span(rest)), limits);
  if (!payload) {
    ring.giveBack(true);
    return Taken::kAgain;
  }
  // A writer that gave up waiting closed the ring first and may have reused
  // its memory since: what was copied from it is not the frame it sent.
  if (ring.closed()) return Taken::kClosed;
  ring.giveBack(false);
  frame.payload = std::move(*payload);
  return Taken::kFrame;
}

}  // namespace crown::transport::shm
