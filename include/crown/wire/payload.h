// Payload: what a message carries, as segments written with one gathered
// write: the head (bytes the payload owns: a serialized C++ message, or a
// pickle) and then any number of buffers owned elsewhere and kept alive by
// a reference count (a numpy array's memory, say), so bulk data goes from
// its own memory to the socket without a copy. A receiver gets the whole
// payload in one allocation (wire::Bytes). A plain value; not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace crown::wire {

using Bytes = std::string;

class Payload {
 public:
  /// A buffer owned elsewhere: `owner` keeps [data, data + size) alive.
  struct Segment {
    std::shared_ptr<const void> owner;
    const char* data = nullptr;
    std::size_t size = 0;
  };

  Payload() = default;
  Payload(Bytes head) : head_(std::move(head)) {}  // NOLINT: a Bytes is a one-segment payload

  /// Appends a buffer after what the payload holds; nothing is copied.
  void append(std::shared_ptr<const void> owner, const char* data, std::size_t size);

  const Bytes& head() const { return head_; }
  const std::vector<Segment>& segments() const { return segments_; }
  std::size_t size() const;
  bool empty() const { return size() == 0; }

  /// The payload in one buffer: the head itself when there are no segments,
  /// else head and segments joined (one copy: for in-process delivery).
  Bytes join() &&;

 private:
  Bytes head_;
  std::vector<Segment> segments_;
  std::size_t segmentBytes_ = 0;
};

/// Large buffers, recycled: new memory costs a page fault per page at its
/// first touch, so a buffer that held a received payload or a tensor (at
/// least kRecycledBytes) can be handed back when its last reader is done,
/// and the next large payload or tensor is written into it. A few are kept
/// (kRecycledBuffers), together at most kRecycledTotalBytes, so that one
/// huge message does not pin its size in memory for the rest of the run.
/// Thread-safe.
constexpr std::size_t kRecycledBytes = 8 << 20;
constexpr std::size_t kRecycledBuffers = 4;
constexpr std::size_t kRecycledTotalBytes = 256 << 20;
/// A buffer with room for `bytes` (its contents undefined), recycled if one
/// is kept, else empty (the caller allocates).
Bytes takeRecycled(std::size_t bytes);
void recycle(Bytes&& buffer);
/// `buffer` becomes `bytes` long, its contents undefined, for a caller that
/// overwrites every byte (a link reading a frame's payload, a tensor's
/// result): a recycled buffer when one is kept; a fresh large one asks for
/// transparent huge pages before its first touch (a page fault per 2 MiB,
/// not per 4 KiB); no memset either way. Throws std::bad_alloc.
void sizeForOverwrite(Bytes& buffer, std::size_t bytes);

/// Payload bytes that crown's own code copied in this process (encoding,
/// decoding, joining, reading past a frame's head), so that tests can count
/// the copies of a message's journey. Thread-safe.
void countCopied(std::size_t bytes);
std::size_t copiedBytes();

}  // namespace crown::wire
