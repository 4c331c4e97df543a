#include "crown/wire/envelope.h"

#include <cstring>

#include "wire/little_endian.h"

namespace crown::wire {
namespace {

// kind u8 | sender rank u32, local u64 | dest rank u32, local u64 | request id u64 | seq u64 |
// type len u16 | type
constexpr std::size_t kFixedBytes = 1 + 12 + 12 + 8 + 8 + 2;
constexpr std::size_t kMaxTypeBytes = 0xFFFF;

}  // namespace

std::string toString(const ActorId& id) {
  return std::to_string(id.rank) + ":" + std::to_string(id.local);
}

std::size_t encodedSize(const Envelope& envelope) { return kFixedBytes + envelope.type.size(); }

void encodeEnvelope(const Envelope& envelope, std::byte* out) {
  CROWN_CHECK(envelope.type.size() <= kMaxTypeBytes, "message type name too long");
  out[0] = static_cast<std::byte>(envelope.kind);
  storeLe<std::uint32_t>(out + 1, envelope.sender.rank);
  storeLe<std::uint64_t>(out + 5, envelope.sender.local);
  storeLe<std::uint32_t>(out + 13, envelope.dest.rank);
  storeLe<std::uint64_t>(out + 17, envelope.dest.local);
  storeLe<std::uint64_t>(out + 25, envelope.requestId);
  storeLe<std::uint64_t>(out + 33, envelope.seq);
  storeLe<std::uint16_t>(out + 41, static_cast<std::uint16_t>(envelope.type.size()));
  std::memcpy(out + kFixedBytes, envelope.type.data(), envelope.type.size());
}

Envelope decodeEnvelope(const std::byte* in, std::size_t size) {
  if (size < kFixedBytes) {
    throw ProtocolError("envelope of " + std::to_string(size) + " bytes is truncated");
  }
  auto kind = static_cast<std::uint8_t>(in[0]);
  if (kind > static_cast<std::uint8_t>(MessageKind::kPortWatch)) {
    throw ProtocolError("unknown message kind " + std::to_string(kind));
  }
  Envelope envelope;
  envelope.kind = static_cast<MessageKind>(kind);
  envelope.sender = {loadLe<std::uint32_t>(in + 1), loadLe<std::uint64_t>(in + 5)};
  envelope.dest = {loadLe<std::uint32_t>(in + 13), loadLe<std::uint64_t>(in + 17)};
  envelope.requestId = loadLe<std::uint64_t>(in + 25);
  envelope.seq = loadLe<std::uint64_t>(in + 33);
  std::size_t typeBytes = loadLe<std::uint16_t>(in + 41);
  if (kFixedBytes + typeBytes != size) {
    throw ProtocolError("envelope type name of " + std::to_string(typeBytes) +
                        " bytes does not fit an envelope of " + std::to_string(size));
  }
  envelope.type.assign(reinterpret_cast<const char*>(in + kFixedBytes), typeBytes);
  return envelope;
}

}  // namespace crown::wire
