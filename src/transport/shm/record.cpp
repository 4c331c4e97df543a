#include "transport/shm/record.h"

#include <cstdint>
#include <cstring>

#include "crown/common/error.h"

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

Frame frameOf(std::string&& record, const wire::FrameLimits& limits) {
  std::uint32_t envelopeBytes = 0;
  if (record.size() < 4) throw ProtocolError("a record shorter than its header");
  std::memcpy(&envelopeBytes, record.data(), 4);
  if (envelopeBytes > limits.maxEnvelopeBytes || 4 + std::size_t{envelopeBytes} > record.size()) {
    throw ProtocolError("an envelope of " + std::to_string(envelopeBytes) + " bytes");
  }
  std::uint64_t payloadBytes = record.size() - 4 - envelopeBytes;
  if (!limits.allows(payloadBytes)) throw ProtocolError(limits.refusal(payloadBytes));
  Frame frame{
      wire::decodeEnvelope(reinterpret_cast<const std::byte*>(record.data() + 4), envelopeBytes),
      {}};
  record.erase(0, 4 + std::size_t{envelopeBytes});  // in place: no second buffer
  frame.payload = std::move(record);
  return frame;
}

}  // namespace crown::transport::shm
