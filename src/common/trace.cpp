// The recording side of traces (crown/common/trace.h). Each thread appends
// to a buffer of its own under its own (uncontended) mutex; take() visits
// them all. The bound is one counter for the process, so a flood of events
// costs memory up to maxEvents and a count past it.
#include "crown/common/trace.h"

#include <pthread.h>

#include <chrono>
#include <memory>
#include <mutex>

namespace crown::trace {
namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

struct ThreadBuffer {
  std::mutex mutex;
  std::vector<Event> events;
  std::uint32_t number = 0;
  std::string name;
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::atomic<std::size_t> recorded{0};
  std::atomic<std::size_t> bound{0};
  std::atomic<std::uint64_t> dropped{0};
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record while the process exits
  return *r;
}

ThreadBuffer& buffer() {
  thread_local std::shared_ptr<ThreadBuffer> mine;
  if (!mine) {
    mine = std::make_shared<ThreadBuffer>();
    char name[64] = {};
    if (::pthread_getname_np(::pthread_self(), name, sizeof name) == 0) mine->name = name;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    mine->number = static_cast<std::uint32_t>(r.buffers.size() + 1);
    r.buffers.push_back(mine);
  }
  return *mine;
}

}  // namespace

void enable(std::size_t maxEvents) {
  registry().bound.store(maxEvents);
  detail::g_on.store(true);
}

void disable() { detail::g_on.store(false); }

std::int64_t now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void record(Event event) {
  Registry& r = registry();
  if (r.recorded.fetch_add(1, std::memory_order_relaxed) >= r.bound.load(std::memory_order_relaxed)) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ThreadBuffer& mine = buffer();
  event.thread = mine.number;
  std::lock_guard lock(mine.mutex);
  mine.events.push_back(std::move(event));
}

void instant(const char* category, std::string name, std::string detail) {
  record(Event{'i', category, std::move(name), now(), 0, 0, 0, std::move(detail)});
}

void flowStart(const char* category, std::uint64_t id) {
  record(Event{'s', category, "flow", now(), 0, id, 0, {}});
}

void flowEnd(const char* category, std::uint64_t id) {
  record(Event{'f', category, "flow", now(), 0, id, 0, {}});
}

std::uint64_t flowId(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  // splitmix64 over the three: ids of distinct triples collide with
  // probability 2^-64, and stay below 2^53 so that JSON keeps them exact.
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                    (c + 0x85EBCA77C2B2AE63ull) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  return x & ((1ull << 53) - 1);
}

Recorded take() {
  Registry& r = registry();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard lock(r.mutex);
    buffers = r.buffers;
  }
  Recorded out;
  for (const auto& b : buffers) {
    std::lock_guard lock(b->mutex);
    out.events.insert(out.events.end(), std::make_move_iterator(b->events.begin()),
                      std::make_move_iterator(b->events.end()));
    b->events.clear();
    out.threads.emplace_back(b->number, b->name);
  }
  out.dropped = r.dropped.exchange(0);
  r.recorded.store(0);
  return out;
}

namespace {
// Spans are locals, so those of one thread begin and end nested: a stack.
thread_local Span* t_innermost = nullptr;
}  // namespace

void Span::begin(const char* category, std::string name, std::string detail) {
  if (active_) end();
  active_ = true;
  outer_ = std::exchange(t_innermost, this);
  event_ = Event{'X', category, std::move(name), now(), 0, 0, 0, std::move(detail)};
}

void Span::renameInnermost(std::string name) {
  if (t_innermost) t_innermost->event_.name = std::move(name);
}

void Span::end() {
  if (!active_) return;
  active_ = false;
  t_innermost = outer_;
  event_.durationNs = now() - event_.startNs;
  record(std::move(event_));
}

}  // namespace crown::trace
