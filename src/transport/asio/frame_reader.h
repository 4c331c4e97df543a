// Splits a byte stream into frames. Reads land in one buffer so that many
// small frames cost one read; a large payload is read straight into its own
// string, so it is copied once. Lengths are checked against the limits before
// any allocation (design.md, "Messages"). Owned by one io coroutine.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "crown/wire/frame.h"
#include "crown/wire/serialize.h"

namespace crown::transport {

struct ReceivedFrame {
  wire::Envelope envelope;
  wire::Bytes payload;
};

class FrameReader {
 public:
  explicit FrameReader(const wire::FrameLimits& limits, std::size_t bufferBytes = 64 * 1024);

  /// Where the next read should land; never empty.
  std::span<std::byte> space();
  /// `n` bytes were read into space().
  void commit(std::size_t n);
  /// The next complete frame, if any. Throws ProtocolError on a bad frame;
  /// the stream cannot be resynchronised after that.
  std::optional<ReceivedFrame> next();

 private:
  void reserve(std::size_t bytes);  // room for `bytes` from begin_

  wire::FrameLimits limits_;
  std::size_t directThreshold_;
  std::vector<std::byte> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::optional<ReceivedFrame> large_;  // a frame whose payload is being read in place
  std::size_t largeFilled_ = 0;
};

}  // namespace crown::transport
