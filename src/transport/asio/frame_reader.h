// Splits a byte stream into frames. Reads land in one buffer so that many
// small frames cost one read; a large payload is read straight into its own
// string, so it is copied once. Lengths are checked against the limits before
// any allocation (design.md, "Messages"). With an opener, every frame is
// followed by its tag and is handed out only once the tag checks (SEC-1); a
// large payload is checked (or decrypted) as it arrives, while it is still
// in cache. Owned by one io coroutine.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "crown/wire/frame.h"
#include "crown/wire/serialize.h"
#include "transport/frame_seal.h"

namespace crown::transport {

struct ReceivedFrame {
  wire::Envelope envelope;
  wire::Bytes payload;
};

class FrameReader {
 public:
  /// `opener` (kept by the caller) checks each frame; null under FabricSecurity::kAuth.
  explicit FrameReader(const wire::FrameLimits& limits, FrameOpener* opener = nullptr,
                       std::size_t bufferBytes = 64 * 1024);

  /// Where the next read should land; never empty.
  std::span<std::byte> space();
  /// `n` bytes were read into space().
  void commit(std::size_t n);
  /// The next complete frame, if any. Throws ProtocolError on a bad frame or
  /// a failed tag; the stream cannot be resynchronised after that.
  std::optional<ReceivedFrame> next();

 private:
  void reserve(std::size_t bytes);  // room for `bytes` from begin_

  bool readingLargePayload() const { return large_ && largeFilled_ < large_->payload.size(); }

  wire::FrameLimits limits_;
  FrameOpener* opener_;
  std::size_t tagBytes_;
  std::size_t directThreshold_;
  std::vector<std::byte> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::optional<ReceivedFrame> large_;  // a frame whose payload is being read in place
  std::size_t largeFilled_ = 0;
};

}  // namespace crown::transport
