#include "crown/wire/payload.h"

#include <atomic>
#include <cstring>
#include <mutex>

namespace crown::wire {

namespace {
std::atomic<std::size_t> g_copied{0};

std::mutex g_recycledMutex;
std::vector<Bytes>& recycled() {
  static auto* kept = new std::vector<Bytes>();  // never destroyed: used at exit too
  return *kept;
}
}  // namespace

Bytes takeRecycled(std::size_t bytes) {
  if (bytes < kRecycledBytes) return {};
  std::lock_guard lock(g_recycledMutex);
  auto& kept = recycled();
  for (auto it = kept.begin(); it != kept.end(); ++it) {
    // Not much larger than needed, so a small payload does not pin a huge buffer.
    if (it->capacity() >= bytes && it->capacity() <= 2 * bytes) {
      Bytes buffer = std::move(*it);
      kept.erase(it);
      return buffer;
    }
  }
  return {};
}

void recycle(Bytes&& buffer) {
  if (buffer.capacity() < kRecycledBytes || buffer.capacity() > kRecycledTotalBytes) return;
  std::vector<Bytes> freed;  // released after the lock
  std::lock_guard lock(g_recycledMutex);
  auto& kept = recycled();
  std::size_t total = buffer.capacity();
  for (const auto& k : kept) total += k.capacity();
  while (!kept.empty() && (kept.size() == kRecycledBuffers || total > kRecycledTotalBytes)) {
    total -= kept.front().capacity();  // the oldest goes
    freed.push_back(std::move(kept.front()));
    kept.erase(kept.begin());
  }
  kept.push_back(std::move(buffer));
}

void countCopied(std::size_t bytes) { g_copied.fetch_add(bytes, std::memory_order_relaxed); }
std::size_t copiedBytes() { return g_copied.load(std::memory_order_relaxed); }

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
  countCopied(segmentBytes_);
  segments_.clear();
  segmentBytes_ = 0;
  return out;
}

}  // namespace crown::wire
