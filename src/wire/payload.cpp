#include "crown/wire/payload.h"

#include <cstring>

namespace crown::wire {

void Payload::append(std::shared_ptr<const void> owner, const char* data, std::size_t size) {
  if (size == 0) return;
  segments_.push_back({std::move(owner), data, size});
  segmentBytes_ += size;
}

std::size_t Payload::size() const { return head_.size() + segmentBytes_; }

Bytes Payload::join() && {
  if (segments_.empty()) return std::move(head_);
  Bytes out = std::move(head_);
  std::size_t at = out.size();
  out.resize(at + segmentBytes_);
  for (const Segment& segment : segments_) {
    std::memcpy(out.data() + at, segment.data, segment.size);
    at += segment.size;
  }
  segments_.clear();
  segmentBytes_ = 0;
  return out;
}

}  // namespace crown::wire
