// The frame: what crosses a link. A fixed little-endian header, then the
// envelope, then the payload:
//
//   magic u32 'CRWN' | version u16 | flags u16 | envelope_bytes u32 | payload_bytes u64
//
// Lengths are checked against FrameLimits before anything is allocated, so a
// peer cannot make a rank allocate more than the limit. Pure functions; any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "crown/wire/envelope.h"

namespace crown::wire {

constexpr std::uint32_t kFrameMagic = 0x4E575243;  // "CRWN" read as little-endian bytes
constexpr std::uint16_t kFrameVersion = 1;
constexpr std::size_t kFrameHeaderBytes = 20;

struct FrameLimits {
  std::uint32_t maxEnvelopeBytes = 64 * 1024;
  std::uint64_t maxPayloadBytes = std::uint64_t{1} << 30;

  /// Defaults, with the payload limit from CROWN_MAX_FRAME_BYTES.
  static FrameLimits fromEnv();
  bool allows(std::uint64_t payloadBytes) const { return payloadBytes <= maxPayloadBytes; }
  /// "payload of N bytes exceeds the frame limit of M (CROWN_MAX_FRAME_BYTES)".
  std::string refusal(std::uint64_t payloadBytes) const;
};

struct FrameHeader {
  std::uint16_t flags = 0;
  std::uint32_t envelopeBytes = 0;
  std::uint64_t payloadBytes = 0;
};

void encodeHeader(const FrameHeader& header, std::byte* out);

/// Throws ProtocolError on a bad magic, an unknown version, or a length over the limits.
FrameHeader decodeHeader(const std::byte* in, const FrameLimits& limits);

/// Header and envelope of one frame, ready to write before its payload.
std::string encodeFrameHead(const Envelope& envelope, std::uint64_t payloadBytes);

}  // namespace crown::wire
