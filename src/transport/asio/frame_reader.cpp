#include "transport/asio/frame_reader.h"

#include <cstring>

namespace crown::transport {

FrameReader::FrameReader(const wire::FrameLimits& limits, std::size_t bufferBytes)
    : limits_(limits), directThreshold_(bufferBytes), buffer_(bufferBytes) {}

std::span<std::byte> FrameReader::space() {
  if (large_) {
    auto& payload = large_->payload;
    return {reinterpret_cast<std::byte*>(payload.data()) + largeFilled_,
            payload.size() - largeFilled_};
  }
  if (end_ == buffer_.size()) reserve(end_ - begin_ + 1);
  return {buffer_.data() + end_, buffer_.size() - end_};
}

void FrameReader::commit(std::size_t n) {
  if (large_) {
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
    if (largeFilled_ < large_->payload.size()) return std::nullopt;
    auto frame = std::move(large_);
    large_.reset();
    return frame;
  }
  std::size_t available = end_ - begin_;
  if (available < wire::kFrameHeaderBytes) {
    if (available == 0) begin_ = end_ = 0;
    return std::nullopt;
  }
  const std::byte* at = buffer_.data() + begin_;
  wire::FrameHeader header = wire::decodeHeader(at, limits_);  // limits checked before allocating
  std::size_t headBytes = wire::kFrameHeaderBytes + header.envelopeBytes;
  if (available < headBytes) {
    reserve(headBytes);
    return std::nullopt;
  }
  std::size_t payloadBytes = static_cast<std::size_t>(header.payloadBytes);
  std::size_t totalBytes = headBytes + payloadBytes;
  if (available < totalBytes && payloadBytes <= directThreshold_) {
    reserve(totalBytes);
    return std::nullopt;
  }
  ReceivedFrame frame;
  frame.envelope = wire::decodeEnvelope(at + wire::kFrameHeaderBytes, header.envelopeBytes);
  const char* payload = reinterpret_cast<const char*>(at + headBytes);
  if (available >= totalBytes) {
    frame.payload.assign(payload, payloadBytes);
    begin_ += totalBytes;
    return frame;
  }
  // A large payload: keep what arrived, read the rest in place.
  std::size_t have = available - headBytes;
  frame.payload.resize(payloadBytes);
  std::memcpy(frame.payload.data(), payload, have);
  begin_ = end_ = 0;
  large_ = std::move(frame);
  largeFilled_ = have;
  return std::nullopt;
}

}  // namespace crown::transport
