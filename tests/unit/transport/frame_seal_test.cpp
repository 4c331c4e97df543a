// Sealed frames (frame_seal.h) through the FrameReader: every security
// setting round-trips, and a frame forged, replayed, reordered, dropped or
// read under another key is refused (SEC-1, issue 10).
#include <gtest/gtest.h>

#include <cstring>

#include "support/frame_feed.h"

namespace crown::transport {
namespace {

SessionKey someKey() {
  SessionKey key{};
  Nonce random = randomNonce();
  std::memcpy(key.data(), random.data(), key.size());
  return key;
}

// One direction of a link: seals frames into a byte stream.
struct Writer {
  Writer(FabricSecurity security, const SessionKey& key) : sealer(security, key) {}
  std::string frame(const std::string& type, const std::string& payload) {
    wire::Envelope envelope{wire::MessageKind::kOneWay, {0, 1}, {1, 2}, 0, type};
    std::string head = wire::encodeFrameHead(envelope, payload.size());
    std::string ciphertext;
    FrameTag tag{};
    sealer.seal(head, wire::Payload(payload), ciphertext, tag);
    bool encrypted = sealer.security() == FabricSecurity::kEncrypt;
    return head + (encrypted ? ciphertext : payload) + std::string(tag.data(), tag.size());
  }
  FrameSealer sealer;
};

using crown::testing::feed;
using crown::testing::feedInto;

std::string bigPayload() {
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  return big;
}

class SealedFrames : public ::testing::TestWithParam<FabricSecurity> {};

INSTANTIATE_TEST_SUITE_P(Security, SealedFrames,
                         ::testing::Values(FabricSecurity::kIntegrity, FabricSecurity::kEncrypt),
                         [](const auto& info) { return std::string(securityName(info.param)); });

TEST_P(SealedFrames, RoundTripSmallAndLargeFramesInAnyChunking) {
  SessionKey key = someKey();
  for (std::size_t chunk : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 22}) {
    Writer writer(GetParam(), key);
    FrameOpener opener(GetParam(), key);
    FrameReader reader(wire::FrameLimits{}, &opener, 4096);
    std::string big = bigPayload();
    std::string stream = writer.frame("a", "one");  // one statement each: sealing order is wire order
    stream += writer.frame("big", big);
    stream += writer.frame("empty", "");
    stream += writer.frame("after", "x");
    std::vector<ReceivedFrame> frames;
    EXPECT_NO_THROW(feedInto(reader, stream, chunk, frames)) << "chunk " << chunk;
    ASSERT_EQ(frames.size(), 4u) << "chunk " << chunk;
    EXPECT_EQ(frames[0].payload, "one");
    EXPECT_EQ(frames[1].envelope.type, "big");
    EXPECT_TRUE(frames[1].payload == big);
    EXPECT_EQ(frames[2].payload, "");
    EXPECT_EQ(frames[3].envelope.type, "after");
  }
}

// A large payload sealed a chunk at a time as it is written (the link's
// way) puts the same bytes on the wire as one sealed at once, even when its
// chunks cut across its segments and other frames are sealed in between.
TEST_P(SealedFrames, AStreamedSealPutsTheSameBytesOnTheWire) {
  SessionKey key = someKey();
  std::string big = bigPayload() + bigPayload() + "tail";  // over two chunks
  auto payloadInPieces = [&] {
    wire::Payload payload(big.substr(0, 1000));
    auto owner = std::make_shared<std::string>(big);
    payload.append(owner, owner->data() + 1000, 700000);
    payload.append(owner, owner->data() + 701000, big.size() - 701000);
    return payload;
  };
  wire::Envelope envelope{wire::MessageKind::kOneWay, {0, 1}, {1, 2}, 0, "big"};
  Writer whole(GetParam(), key);
  std::string expected = whole.frame("big", big);
  expected += whole.frame("after", "x");  // one statement each: sealing order is wire order

  Writer streaming(GetParam(), key);
  wire::Payload payload = payloadInPieces();
  std::string head = wire::encodeFrameHead(envelope, payload.size());
  std::unique_ptr<StreamedSeal> seal = streaming.sealer.beginStreamed(head);
  std::string after = streaming.frame("after", "x");  // sealed while `big` is being written
  std::string wire = head;
  bool encrypted = GetParam() == FabricSecurity::kEncrypt;
  for (std::size_t at = 0; at < payload.size(); at += kStreamedSealBytes) {
    std::size_t n = std::min(kStreamedSealBytes, payload.size() - at);
    std::string chunk(n, '\0');
    seal->update(payload, at, n, encrypted ? chunk.data() : nullptr);
    wire += encrypted ? chunk : big.substr(at, n);
  }
  FrameTag tag{};
  seal->finish(tag);
  wire += std::string(tag.data(), tag.size()) + after;
  ASSERT_EQ(wire.size(), expected.size());
  std::size_t differs = std::mismatch(wire.begin(), wire.end(), expected.begin()).first - wire.begin();
  EXPECT_EQ(differs, wire.size()) << "the bytes differ from " << differs;
}

TEST_P(SealedFrames, AnyFlippedBitIsRefused) {
  SessionKey key = someKey();
  Writer probe(GetParam(), key);
  std::size_t length = probe.frame("t", "payload").size();
  for (std::size_t at = 0; at < length; ++at) {
    // Header bytes that break framing fail earlier, also as a ProtocolError.
    Writer writer(GetParam(), key);
    FrameOpener opener(GetParam(), key);
    FrameReader reader(wire::FrameLimits{}, &opener);
    std::string stream = writer.frame("t", "payload");
    stream[at] ^= 0x01;
    try {
      auto frames = feed(reader, stream, 1 << 20);
      EXPECT_TRUE(frames.empty()) << "a frame flipped at byte " << at << " was accepted";
    } catch (const ProtocolError&) {
    }
  }
}

TEST_P(SealedFrames, ReplayedReorderedOrDroppedFramesAreRefused) {
  SessionKey key = someKey();
  auto accepted = [&](auto arrange) {
    Writer writer(GetParam(), key);
    std::string first = writer.frame("t", "first");
    std::string second = writer.frame("t", "second");
    FrameOpener opener(GetParam(), key);
    FrameReader reader(wire::FrameLimits{}, &opener);
    std::vector<ReceivedFrame> frames;
    try {
      feedInto(reader, arrange(first, second), 1 << 20, frames);
    } catch (const ProtocolError&) {
    }
    return frames.size();
  };
  EXPECT_EQ(accepted([](auto& a, auto& b) { return a + b; }), 2u);
  EXPECT_EQ(accepted([](auto& a, auto&) { return a + a; }), 1u);  // replayed
  EXPECT_EQ(accepted([](auto& a, auto& b) { return b + a; }), 0u);  // reordered
  EXPECT_EQ(accepted([](auto&, auto& b) { return b; }), 0u);        // first dropped
}

TEST_P(SealedFrames, AnotherKeyIsRefused) {
  Writer writer(GetParam(), someKey());
  FrameOpener opener(GetParam(), someKey());
  FrameReader reader(wire::FrameLimits{}, &opener);
  EXPECT_THROW(feed(reader, writer.frame("t", "payload"), 1 << 20), ProtocolError);
}

TEST(SealedFrames, EncryptHidesThePayloadAndIntegrityDoesNot) {
  SessionKey key = someKey();
  std::string secretText = "a payload nobody on the path may read";
  Writer encrypting(FabricSecurity::kEncrypt, key);
  Writer authenticating(FabricSecurity::kIntegrity, key);
  EXPECT_EQ(encrypting.frame("t", secretText).find(secretText), std::string::npos);
  EXPECT_NE(authenticating.frame("t", secretText).find(secretText), std::string::npos);
}

}  // namespace
}  // namespace crown::transport
