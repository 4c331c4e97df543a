// Feeds a byte stream to a FrameReader in reads of at most `chunk` bytes,
// as a socket would, collecting the frames it hands out.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "transport/asio/frame_reader.h"

namespace crown::testing {

/// Appends to `frames` as they come; throws what the reader throws.
inline void feedInto(transport::FrameReader& reader, const std::string& stream, std::size_t chunk,
                     std::vector<transport::ReceivedFrame>& frames) {
  std::size_t at = 0;
  while (at < stream.size()) {
    auto space = reader.space();
    std::size_t n = std::min({chunk, space.size(), stream.size() - at});
    std::memcpy(space.data(), stream.data() + at, n);
    reader.commit(n);
    at += n;
    while (auto frame = reader.next()) frames.push_back(std::move(*frame));
  }
}

inline std::vector<transport::ReceivedFrame> feed(transport::FrameReader& reader,
                                                  const std::string& stream, std::size_t chunk) {
  std::vector<transport::ReceivedFrame> frames;
  feedInto(reader, stream, chunk, frames);
  return frames;
}

}  // namespace crown::testing
