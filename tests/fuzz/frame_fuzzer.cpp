// fuzz_frame: the frame and envelope decoders (wire::decodeHeader,
// wire::decodeEnvelope) as a link meets them, behind the FrameReader that
// splits a TCP or Unix byte stream into frames and checks (or decrypts)
// each frame's tag under every FabricSecurity. Beyond "no crash, no leak,
// no UB", it checks that the frames do not depend on how the stream was cut
// into reads or on the reader's buffer size, and that each frame, encoded
// again, reads back as itself.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "crown/common/error.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"
#include "transport/asio/frame_reader.h"
#include "transport/frame_seal.h"

namespace {

using crown::transport::FabricSecurity;
using crown::transport::FrameOpener;
using crown::transport::FrameReader;
using crown::transport::ReceivedFrame;

// A payload limit far below the default 1 GiB: the reader allocates what a
// valid header announces, by design, and the checks are the same.
crown::wire::FrameLimits limits() {
  crown::wire::FrameLimits limits;
  limits.maxPayloadBytes = 1 << 20;
  return limits;
}

// A frame as its bytes on the wire (flags aside: the reader drops them).
std::string wireForm(const ReceivedFrame& frame) {
  return crown::wire::encodeFrameHead(frame.envelope, frame.payload.size()) + frame.payload;
}

// Every frame the reader takes from `stream`, read `nextRead(room)` bytes at
// a time, up to the first bad frame.
template <class NextRead>
std::vector<std::string> readFrames(const std::vector<std::byte>& stream, FabricSecurity security,
                                    std::size_t bufferBytes, NextRead nextRead) {
  std::optional<FrameOpener> opener;
  if (security != FabricSecurity::kAuth) opener.emplace(security, crown::fuzz::kFrameKey);
  FrameReader reader(limits(), opener ? &*opener : nullptr, bufferBytes);
  std::vector<std::string> frames;
  std::size_t at = 0;
  try {
    while (at < stream.size()) {
      auto space = reader.space();
      CROWN_FUZZ_CHECK(!space.empty());
      std::size_t n = std::min({nextRead(space.size()), space.size(), stream.size() - at});
      std::memcpy(space.data(), stream.data() + at, n);
      reader.commit(n);
      at += n;
      while (auto frame = reader.next()) {
        CROWN_FUZZ_CHECK(frame->payload.size() <= limits().maxPayloadBytes);
        frames.push_back(wireForm(*frame));
      }
    }
  } catch (const crown::ProtocolError&) {
    // The link would close here: nothing after a bad frame is read.
  }
  return frames;
}

// The reference: one buffer for the whole stream, filled by one read. (Not
// the default 64 KiB buffer, whose allocation would cost more than the run.)
std::vector<std::string> readWhole(const std::vector<std::byte>& stream, FabricSecurity security) {
  return readFrames(stream, security, stream.size() + 1, [](std::size_t room) { return room; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  crown::fuzz::FrameSettings settings;
  input.ConsumeData(&settings, sizeof settings);
  std::vector<std::byte> stream = input.ConsumeRemainingBytes<std::byte>();
  auto security = static_cast<FabricSecurity>(1 + settings.security % 3);

  std::minstd_rand chunks(settings.chunkSeed);
  std::size_t maxChunk = 1 + settings.maxChunk % 4096;
  auto cut = readFrames(stream, security, 1 + settings.bufferBytes % 4096,
                        [&](std::size_t) { return 1 + chunks() % maxChunk; });
  auto whole = readWhole(stream, security);
  CROWN_FUZZ_CHECK(cut == whole);

  // The frames as they were read, in clear.
  std::string again;
  for (const std::string& frame : whole) again += frame;
  auto* begin = reinterpret_cast<const std::byte*>(again.data());
  CROWN_FUZZ_CHECK(readWhole({begin, begin + again.size()}, FabricSecurity::kAuth) == whole);
  return 0;
}
