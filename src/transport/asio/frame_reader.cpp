#include "transport/asio/frame_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>


namespace crown::transport {

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
  wire::sizeForOverwrite(frame.payload, payloadBytes);
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
