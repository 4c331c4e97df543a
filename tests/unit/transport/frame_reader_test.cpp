#include <gtest/gtest.h>

#include <cstring>

#include "support/frame_feed.h"

namespace crown::transport {
namespace {

std::string frameBytes(const std::string& type, const std::string& payload) {
  wire::Envelope envelope{wire::MessageKind::kOneWay, {0, 1}, {1, 2}, 0, type};
  return wire::encodeFrameHead(envelope, payload.size()) + payload;
}

using crown::testing::feed;

TEST(FrameReader, SplitsAStreamReadByteByByte) {
  FrameReader reader(wire::FrameLimits{});
  std::string stream = frameBytes("a", "one") + frameBytes("b", "") + frameBytes("c", "three");
  auto frames = feed(reader, stream, 1);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].envelope.type, "a");
  EXPECT_EQ(frames[0].payload, "one");
  EXPECT_EQ(frames[1].payload, "");
  EXPECT_EQ(frames[2].payload, "three");
}

TEST(FrameReader, ManySmallFramesInOneRead) {
  FrameReader reader(wire::FrameLimits{});
  std::string stream;
  for (int i = 0; i < 1000; ++i) stream += frameBytes("m", std::to_string(i));
  auto frames = feed(reader, stream, 1 << 20);
  ASSERT_EQ(frames.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(frames[i].payload, std::to_string(i));
}

TEST(FrameReader, LargePayloadIsReadInPlace) {
  FrameReader reader(wire::FrameLimits{}, nullptr, 4096);
  std::string big(1 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  std::string stream = frameBytes("big", big) + frameBytes("after", "x");
  auto frames = feed(reader, stream, 1000);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].payload, big);
  EXPECT_EQ(frames[1].envelope.type, "after");
}

TEST(FrameReader, OversizedFrameIsRefusedBeforeItsPayloadArrives) {
  wire::FrameLimits limits;
  limits.maxPayloadBytes = 1000;
  FrameReader reader(limits);
  std::string head = frameBytes("big", std::string(1001, 'x')).substr(0, wire::kFrameHeaderBytes);
  auto space = reader.space();
  std::memcpy(space.data(), head.data(), head.size());
  reader.commit(head.size());
  EXPECT_THROW(reader.next(), ProtocolError);
}

TEST(FrameReader, GarbageIsAProtocolError) {
  FrameReader reader(wire::FrameLimits{});
  std::string garbage(64, 'G');
  EXPECT_THROW(feed(reader, garbage, 64), ProtocolError);
}

TEST(FrameReader, TruncatedFrameYieldsNothing) {
  FrameReader reader(wire::FrameLimits{});
  std::string frame = frameBytes("t", "payload");
  auto frames = feed(reader, frame.substr(0, frame.size() - 1), 3);
  EXPECT_TRUE(frames.empty());
}

}  // namespace
}  // namespace crown::transport
