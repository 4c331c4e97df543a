#include <gtest/gtest.h>

#include <cstring>

#include "crown/wire/frame.h"

namespace crown::wire {
namespace {

Envelope sampleEnvelope() {
  return Envelope{MessageKind::kRequest, {3, 17}, {5, 99}, 123456789, "example.Ping", 42};
}

TEST(Envelope, RoundTripsEveryField) {
  Envelope in = sampleEnvelope();
  std::vector<std::byte> bytes(encodedSize(in));
  encodeEnvelope(in, bytes.data());
  Envelope out = decodeEnvelope(bytes.data(), bytes.size());
  EXPECT_EQ(out.kind, in.kind);
  EXPECT_EQ(out.sender, in.sender);
  EXPECT_EQ(out.dest, in.dest);
  EXPECT_EQ(out.requestId, in.requestId);
  EXPECT_EQ(out.type, in.type);
  EXPECT_EQ(out.seq, in.seq);
}

TEST(Envelope, TruncatedIsRejected) {
  Envelope in = sampleEnvelope();
  std::vector<std::byte> bytes(encodedSize(in));
  encodeEnvelope(in, bytes.data());
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_THROW(decodeEnvelope(bytes.data(), size), ProtocolError) << "size " << size;
  }
}

TEST(Envelope, TrailingBytesAreRejected) {
  Envelope in = sampleEnvelope();
  std::vector<std::byte> bytes(encodedSize(in) + 1);
  encodeEnvelope(in, bytes.data());
  EXPECT_THROW(decodeEnvelope(bytes.data(), bytes.size()), ProtocolError);
}

TEST(Envelope, UnknownKindIsRejected) {
  Envelope in = sampleEnvelope();
  std::vector<std::byte> bytes(encodedSize(in));
  encodeEnvelope(in, bytes.data());
  bytes[0] = std::byte{static_cast<std::uint8_t>(MessageKind::kPortWatch) + 1};  // past the last kind
  EXPECT_THROW(decodeEnvelope(bytes.data(), bytes.size()), ProtocolError);
}

TEST(Frame, HeaderRoundTrips) {
  std::byte bytes[kFrameHeaderBytes];
  encodeHeader({7, 40, 1000}, bytes);
  FrameHeader header = decodeHeader(bytes, FrameLimits{});
  EXPECT_EQ(header.flags, 7);
  EXPECT_EQ(header.envelopeBytes, 40u);
  EXPECT_EQ(header.payloadBytes, 1000u);
}

TEST(Frame, BadMagicIsRejected) {
  std::byte bytes[kFrameHeaderBytes];
  encodeHeader({0, 40, 10}, bytes);
  bytes[0] = std::byte{'X'};
  EXPECT_THROW(decodeHeader(bytes, FrameLimits{}), ProtocolError);
}

TEST(Frame, UnknownVersionIsRejected) {
  std::byte bytes[kFrameHeaderBytes];
  encodeHeader({0, 40, 10}, bytes);
  bytes[4] = std::byte{kFrameVersion + 1};
  EXPECT_THROW(decodeHeader(bytes, FrameLimits{}), ProtocolError);
}

TEST(Frame, OversizedPayloadIsRejectedFromTheHeaderAlone) {
  FrameLimits limits;
  limits.maxPayloadBytes = 1024;
  std::byte bytes[kFrameHeaderBytes];
  encodeHeader({0, 40, 1025}, bytes);
  try {
    decodeHeader(bytes, limits);
    FAIL() << "an oversized payload was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("CROWN_MAX_FRAME_BYTES"), std::string::npos) << e.what();
  }
  encodeHeader({0, 40, 1024}, bytes);
  EXPECT_NO_THROW(decodeHeader(bytes, limits));
}

TEST(Frame, OversizedOrEmptyEnvelopeIsRejected) {
  std::byte bytes[kFrameHeaderBytes];
  encodeHeader({0, FrameLimits{}.maxEnvelopeBytes + 1, 0}, bytes);
  EXPECT_THROW(decodeHeader(bytes, FrameLimits{}), ProtocolError);
  encodeHeader({0, 0, 0}, bytes);
  EXPECT_THROW(decodeHeader(bytes, FrameLimits{}), ProtocolError);
}

TEST(Frame, HeadHoldsHeaderThenEnvelope) {
  Envelope in = sampleEnvelope();
  std::string head = encodeFrameHead(in, 77);
  ASSERT_EQ(head.size(), kFrameHeaderBytes + encodedSize(in));
  auto* bytes = reinterpret_cast<const std::byte*>(head.data());
  FrameHeader header = decodeHeader(bytes, FrameLimits{});
  EXPECT_EQ(header.payloadBytes, 77u);
  EXPECT_EQ(decodeEnvelope(bytes + kFrameHeaderBytes, header.envelopeBytes).type, in.type);
}

TEST(FrameLimits, ReadsTheEnvironment) {
  setenv("CROWN_MAX_FRAME_BYTES", "4096", 1);
  EXPECT_EQ(FrameLimits::fromEnv().maxPayloadBytes, 4096u);
  setenv("CROWN_MAX_FRAME_BYTES", "lots", 1);
  EXPECT_THROW(FrameLimits::fromEnv(), ConfigError);
  unsetenv("CROWN_MAX_FRAME_BYTES");
}

}  // namespace
}  // namespace crown::wire
