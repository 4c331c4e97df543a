#include "crown/wire/frame.h"

#include <cstring>

#include "crown/common/env.h"
#include "wire/little_endian.h"

namespace crown::wire {

FrameLimits FrameLimits::fromEnv() {
  FrameLimits limits;
  limits.maxPayloadBytes = static_cast<std::uint64_t>(
      env::integer("CROWN_MAX_FRAME_BYTES", static_cast<std::int64_t>(limits.maxPayloadBytes), 1024,
                   std::int64_t{1} << 40));
  return limits;
}

std::string FrameLimits::refusal(std::uint64_t payloadBytes) const {
  return "payload of " + std::to_string(payloadBytes) + " bytes exceeds the frame limit of " +
         std::to_string(maxPayloadBytes) + " (CROWN_MAX_FRAME_BYTES)";
}

void encodeHeader(const FrameHeader& header, std::byte* out) {
  storeLe<std::uint32_t>(out, kFrameMagic);
  storeLe<std::uint16_t>(out + 4, kFrameVersion);
  storeLe<std::uint16_t>(out + 6, header.flags);
  storeLe<std::uint32_t>(out + 8, header.envelopeBytes);
  storeLe<std::uint64_t>(out + 12, header.payloadBytes);
}

FrameHeader decodeHeader(const std::byte* in, const FrameLimits& limits) {
  auto magic = loadLe<std::uint32_t>(in);
  if (magic != kFrameMagic) throw ProtocolError("bad frame magic");
  auto version = loadLe<std::uint16_t>(in + 4);
  if (version != kFrameVersion) {
    throw ProtocolError("frame version " + std::to_string(version) + ", expected " +
                        std::to_string(kFrameVersion));
  }
  FrameHeader header;
  header.flags = loadLe<std::uint16_t>(in + 6);
  header.envelopeBytes = loadLe<std::uint32_t>(in + 8);
  header.payloadBytes = loadLe<std::uint64_t>(in + 12);
  if (header.envelopeBytes == 0 || header.envelopeBytes > limits.maxEnvelopeBytes) {
    throw ProtocolError("envelope of " + std::to_string(header.envelopeBytes) +
                        " bytes is outside (0, " + std::to_string(limits.maxEnvelopeBytes) + "]");
  }
  if (!limits.allows(header.payloadBytes)) throw ProtocolError(limits.refusal(header.payloadBytes));
  return header;
}

std::string encodeFrameHead(const Envelope& envelope, std::uint64_t payloadBytes) {
  std::size_t envelopeBytes = encodedSize(envelope);
  std::string head(kFrameHeaderBytes + envelopeBytes, '\0');
  auto* out = reinterpret_cast<std::byte*>(head.data());
  encodeHeader({0, static_cast<std::uint32_t>(envelopeBytes), payloadBytes}, out);
  encodeEnvelope(envelope, out + kFrameHeaderBytes);
  return head;
}

}  // namespace crown::wire
