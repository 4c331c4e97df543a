#include "crown/common/abortable.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace crown {
namespace {

thread_local int t_scopes = 0;

// Leaked: waits on detached threads may outlive static destruction.
struct Registry {
  std::mutex mutex;
  std::vector<detail::AbortableWait*> waits;
  std::exception_ptr error;  // set once, under mutex, before aborted
  std::atomic<bool> aborted{false};
};

Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

}  // namespace

AbortableScope::AbortableScope() { ++t_scopes; }
AbortableScope::~AbortableScope() { --t_scopes; }
bool AbortableScope::active() { return t_scopes > 0; }

bool abortWaits(std::exception_ptr error) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.aborted.load()) return false;
  r.error = std::move(error);
  r.aborted.store(true);
  for (detail::AbortableWait* wait : r.waits) {
    // Taking the waiter's mutex: it is blocked in its wait, or about to
    // block there having tested its predicate before the flag was set.
    std::lock_guard waiter(wait->mutex);
    wait->cv.notify_all();
  }
  return true;
}

std::exception_ptr waitsAborted() {
  Registry& r = registry();
  if (!r.aborted.load()) return nullptr;
  std::lock_guard lock(r.mutex);
  return r.error;
}

bool inAbortableWait(std::thread::id thread) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return std::any_of(r.waits.begin(), r.waits.end(),
                     [&](const detail::AbortableWait* wait) { return wait->thread == thread; });
}

namespace detail {

AbortableWait::AbortableWait(std::mutex& m, std::condition_variable& c)
    : mutex(m), cv(c), thread(std::this_thread::get_id()), registered_(AbortableScope::active()) {
  if (!registered_) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.waits.push_back(this);
}

AbortableWait::~AbortableWait() {
  if (!registered_) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.waits.erase(std::find(r.waits.begin(), r.waits.end(), this));
}

bool AbortableWait::aborted() const { return registered_ && registry().aborted.load(); }

void AbortableWait::rethrow() const { std::rethrow_exception(waitsAborted()); }

}  // namespace detail
}  // namespace crown
