#include "transport/shm/record.h"

#include <cstdint>
#include <cstring>

#include "crown/common/error.h"
#include "transport/payload_buffer.h"

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

// The payload's size in a record of `length` bytes whose envelope has
// `envelopeBytes`; throws ProtocolError when either breaks the format or `limits`.
std::uint64_t payloadBytesOf(std::uint32_t envelopeBytes, std::uint64_t length,
                             const wire::FrameLimits& limits) {
  if (envelopeBytes > limits.maxEnvelopeBytes || 4 + std::uint64_t{envelopeBytes} > length) {
    throw ProtocolError("an envelope of " + std::to_string(envelopeBytes) + " bytes");
  }
  std::uint64_t payloadBytes = length - 4 - envelopeBytes;
  if (!limits.allows(payloadBytes)) throw ProtocolError(limits.refusal(payloadBytes));
  return payloadBytes;
}

std::optional<Frame> readSmallFrame(Ring& ring, std::uint64_t length,
                                    const wire::FrameLimits& limits) {
  std::string record(length, '\0');
  if (!ring.take(std::as_writable_bytes(std::span(record)))) return std::nullopt;
  std::uint32_t envelopeBytes = 0;
  std::memcpy(&envelopeBytes, record.data(), 4);
  payloadBytesOf(envelopeBytes, length, limits);
  Frame frame{
      wire::decodeEnvelope(reinterpret_cast<const std::byte*>(record.data() + 4), envelopeBytes),
      {}};
  record.erase(0, 4 + std::size_t{envelopeBytes});
  frame.payload = std::move(record);
  return frame;
}

}  // namespace

std::optional<Frame> readFrame(Ring& ring, std::uint64_t length, const wire::FrameLimits& limits) {
  if (length < 4) throw ProtocolError("a record shorter than its header");
  if (length <= kWholeRecordBytes) return readSmallFrame(ring, length, limits);
  std::uint32_t envelopeBytes = 0;
  if (!ring.take(std::as_writable_bytes(std::span(&envelopeBytes, 1)))) return std::nullopt;
  std::uint64_t payloadBytes = payloadBytesOf(envelopeBytes, length, limits);
  std::vector<std::byte> envelope(envelopeBytes);
  if (!ring.take(envelope)) return std::nullopt;
  Frame frame{wire::decodeEnvelope(envelope.data(), envelope.size()), {}};
  allocateForPayload(frame.payload, payloadBytes);
  if (!ring.take(std::as_writable_bytes(std::span(frame.payload)))) return std::nullopt;
  return frame;
}

}  // namespace crown::transport::shm
