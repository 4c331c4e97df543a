// Abortable waits: the waits of the controller's program, which the end of
// the job can fail (docs/supervision.md, "The job ends when it must").
//
// A front end marks a wait as its program's by entering an AbortableScope
// around it (python/src: a binding's Future.get on the controller, outside
// any actor). Future waits (FutureState::waitUntil) and stream waits
// (MeshStream::take) made inside a scope register while they wait;
// abortWaits(error) then fails every one of them, in progress or to come,
// with `error`: no polling, and no wake-up lost. The runtime's own waits
// (shutdown, stopping a mesh) never enter a scope, so they are never failed,
// and a program can still shut down after an abort.
//
// No lost wake-up: a waiter registers (the registry mutex) before it takes
// its own mutex and tests its predicate, and abortWaits sets the flag, then
// takes each registered waiter's mutex before notifying it. A waiter that
// tested before the flag was set is either blocked in its wait (woken) or
// still holds its mutex (abortWaits waits for it to block, then wakes it).
// Lock order: registry, then a waiter's; a waiter never takes the registry
// while it holds its own. Thread-safe; one registry per process.
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace crown {

/// Marks the waits this thread makes within its lifetime as the
/// controller program's: abortWaits fails them. Nestable; thread-local.
class AbortableScope {
 public:
  AbortableScope();
  ~AbortableScope();
  AbortableScope(const AbortableScope&) = delete;
  AbortableScope& operator=(const AbortableScope&) = delete;

  /// Whether this thread is within a scope.
  static bool active();
};

/// Fails every abortable wait, in progress or to come, with `error`. The
/// first call wins (true); later ones change nothing (false).
bool abortWaits(std::exception_ptr error);

/// The error abortWaits set; null before.
std::exception_ptr waitsAborted();

/// Whether thread `thread` is blocked in an abortable wait now.
bool inAbortableWait(std::thread::id thread);

namespace detail {

/// One wait, registered for its lifetime when its thread is within an
/// AbortableScope (else inert, at the cost of one thread-local read).
/// Construct it before locking `mutex`; test aborted() in the predicate.
class AbortableWait {
 public:
  AbortableWait(std::mutex& mutex, std::condition_variable& cv);
  ~AbortableWait();
  AbortableWait(const AbortableWait&) = delete;
  AbortableWait& operator=(const AbortableWait&) = delete;

  /// Whether this wait has been aborted (false when not registered).
  bool aborted() const;
  /// Throws the abort's error.
  [[noreturn]] void rethrow() const;

  std::mutex& mutex;
  std::condition_variable& cv;
  const std::thread::id thread;

 private:
  bool registered_;
};

}  // namespace detail
}  // namespace crown
