// ReaderTurns: which thread reads an inbound shared-memory link (issue 14's
// same-host fast path). The thread that takes a frame out of the ring runs
// the handler it starts right there (transport/inline_tasks.h), so a
// request costs no hand-off to a pool thread and no wake-up. A handler may
// block or run long, though, and the ring must still be read meanwhile (the
// reply it waits for may come on it; so do the peer's heartbeats). So a
// thread running a handler can be relieved:
//   - at once, when the handler is about to block (BlockingScope: a
//     Future::get(), a FLO-1 wait);
//   - by ReliefWatch (relief_watch.h), once it has run past its budget.
// Relieving hands the reading to a spare thread of this link (a new one if
// there is none); the relieved thread becomes a spare once its handler
// returns. At most one thread reads the ring at a time: the holder of the
// latest turn, and a turn passes on only while its holder runs a handler.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace crown::transport::shm {

class ReaderTurns : public std::enable_shared_from_this<ReaderTurns> {
 public:
  using Clock = std::chrono::steady_clock;
  /// A reader's body: reads until the link ends (true) or until endInline()
  /// says that this thread was relieved (false).
  using Body = std::function<bool()>;

  /// `onBusy` is called (cheaply, on the reader) as each handler begins,
  /// for ReliefWatch.
  static std::shared_ptr<ReaderTurns> make(Body body, std::function<void()> onBusy = {});
  /// Starts the first reader: the link is read by a thread running `body`
  /// from here on.
  void run();

  /// On the reading thread, around running what delivering a frame started
  /// (not the delivery itself, which keeps the link's order): beginInline()
  /// before, endInline() after; false from endInline()
  /// when this thread was relieved meanwhile (or the link is stopping): it
  /// must not read again.
  void beginInline();
  bool endInline();
  /// Hands the reading on, if the thread that holds it still runs a handler
  /// that began at `since` or earlier (any, when nullopt).
  void relieve(std::optional<Clock::time_point> since = std::nullopt);
  /// When the reading thread's current handler began; nullopt when it runs none.
  std::optional<Clock::time_point> inlineSince() const;

  /// No thread reads from here on; waits up to `bound` for the link's threads
  /// to end and joins them. One still in a handler past it is left to run on
  /// (it ends once the handler returns, reading nothing). Idempotent.
  void stop(std::chrono::milliseconds bound);
  /// Threads this link has started, and those waiting as spares (tests).
  std::size_t threads() const;
  int spares() const;

 private:
  ReaderTurns(Body body, std::function<void()> onBusy);
  void launch();  // with mutex_ held
  void threadMain();

  Body body_;
  std::function<void()> onBusy_;
  mutable std::mutex mutex_;
  std::condition_variable spareCv_;
  std::condition_variable exitedCv_;
  std::uint64_t turn_ = 0;                        // bumped when the reading is handed on
  std::optional<Clock::time_point> inlineSince_;  // the holder runs a handler since
  int spares_ = 0;                                // relieved threads waiting for a turn
  int calls_ = 0;                                 // turns handed to spares, not taken yet
  bool ended_ = false;                            // the link ended, or stop(): nobody reads again
  int live_ = 0;                                  // threads not yet returned from threadMain
  std::vector<std::thread> threads_;
  static inline thread_local std::uint64_t t_turn = 0;        // the turn this thread took
  static inline thread_local ReaderTurns* t_owner = nullptr;  // whose reader this thread is
};

}  // namespace crown::transport::shm
