#include "transport/asio/frame_reader.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace crown::transport {

namespace {
// A large payload's buffer is new memory, and its first touch costs a page
// fault per 4 KiB page (5 us each on some VMs: 90 ms for 64 MiB). Asking for
// transparent huge pages before the first touch makes that 32 faults.
void allocateForPayload(wire::Bytes& payload, std::size_t bytes) {
  constexpr std::uintptr_t kHugePage = 2 << 20;
  payload = wire::takeRecycled(bytes);  // touched already: no faults at all
  payload.clear();
  bool fresh = payload.capacity() < bytes;
  payload.reserve(bytes);
  if (fresh && bytes >= 4 * kHugePage) {
    auto begin = reinterpret_cast<std::uintptr_t>(payload.data());
    std::uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
    std::uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#if defined(__cpp_lib_string_resize_and_overwrite)
  // The socket overwrites every byte: skip resize()'s memset, a whole extra
  // pass over the payload (this file is built as C++23 for it).
  payload.resize_and_overwrite(bytes, [](char*, std::size_t n) { return n; });
#else
  payload.resize(bytes);
#endif
}
}  // namespace

FrameReader::FrameReader(const wire::FrameLimits& limits, FrameOpener* opener,
                         std::size_t bufferBytes)
    : limits_(limits),
      opener_(opener),
      tagBytes_(opener != nullptr ? kFrameTagBytes : 0),
      directThreshold_(bufferBytes),
      buffer_(bufferBytes) {}

std::span<std::byte> FrameReader::space() {
  if (readingLargePayload()) {
    auto& payload = large_->payload;
    return {reinterpret_cast<std::byte*>(payload.data()) + largeFilled_,
            payload.size() - largeFilled_};
  }
  if (end_ == buffer_.size()) reserve(end_ - begin_ + 1);
  return {buffer_.data() + end_, buffer_.size() - end_};
}

void FrameReader::commit(std::size_t n) {
  if (readingLargePayload()) {
    if (opener_ != nullptr) {
      opener_->update(reinterpret_cast<std::byte*>(large_->payload.data()) + largeFilled_, n);
    }
    largeFilled_ += n;
  } else {
    end_ += n;
  }
}

void FrameReader::reserve(std::size_t bytes) {
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() < bytes) buffer_.resize(bytes);
}

std::optional<ReceivedFrame> FrameReader::next() {
  if (large_) {
    if (readingLargePayload() || end_ - begin_ < tagBytes_) return std::nullopt;
    if (opener_ != nullptr) opener_->finish(buffer_.data() + begin_);
    begin_ += tagBytes_;
    auto frame = std::move(large_);
    large_.reset();
    return frame;
  }
  std::size_t available = end_ - begin_;
  if (available < wire::kFrameHeaderBytes) {
    if (available == 0) begin_ = end_ = 0;
    return std::nullopt;
  }
  std::byte* at = buffer_.data() + begin_;
  wire::FrameHeader header = wire::decodeHeader(at, limits_);  // limits checked before allocating
  std::size_t headBytes = wire::kFrameHeaderBytes + header.envelopeBytes;
  if (available < headBytes) {
    reserve(headBytes);
    return std::nullopt;
  }
  std::size_t payloadBytes = static_cast<std::size_t>(header.payloadBytes);
  std::size_t totalBytes = headBytes + payloadBytes + tagBytes_;
  if (available < totalBytes && payloadBytes <= directThreshold_) {
    reserve(totalBytes);
    return std::nullopt;
  }
  std::byte* payload = at + headBytes;
  if (opener_ != nullptr) {
    opener_->begin(at, wire::kFrameHeaderBytes);
    opener_->update(at + wire::kFrameHeaderBytes, header.envelopeBytes);
  }
  ReceivedFrame frame;
  if (available >= totalBytes) {
    if (opener_ != nullptr) {
      opener_->update(payload, payloadBytes);
      opener_->finish(payload + payloadBytes);  // checked before anything is decoded
    }
    frame.envelope = wire::decodeEnvelope(at + wire::kFrameHeaderBytes, header.envelopeBytes);
    frame.payload.assign(reinterpret_cast<const char*>(payload), payloadBytes);
    wire::countCopied(payloadBytes);
    begin_ += totalBytes;
    return frame;
  }
  // A large payload: keep what arrived, read the rest in place. Its envelope
  // is decoded now but handed out only once the tag checks (next()'s first branch).
  frame.envelope = wire::decodeEnvelope(at + wire::kFrameHeaderBytes, header.envelopeBytes);
  std::size_t have = std::min(available - headBytes, payloadBytes);
  allocateForPayload(frame.payload, payloadBytes);
  std::memcpy(frame.payload.data(), payload, have);
  wire::countCopied(have);
  if (opener_ != nullptr) opener_->update(reinterpret_cast<std::byte*>(frame.payload.data()), have);
  begin_ += headBytes + have;
  if (begin_ == end_) begin_ = end_ = 0;
  large_ = std::move(frame);
  largeFilled_ = have;
  return std::nullopt;
}

}  // namespace crown::transport
