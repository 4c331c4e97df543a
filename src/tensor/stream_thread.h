// StreamThread: one stream of a tensor engine, a thread that runs the
// tasks posted to it in order (ORD-1 within a stream), beside the engine's
// other streams. Its queue is bounded: post() waits while it is full, so a
// controller that records faster than the stream runs is held back through
// the engine's mailbox (FLO-1) instead of growing the queue. Any thread may
// post or drain; the tasks run on the stream's own thread and must not throw.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace crown::tensor::detail {

class StreamThread {
 public:
  explicit StreamThread(std::size_t bound);
  /// Runs what is queued, then joins. Queued tasks are not dropped: one may
  /// be what another stream waits for (a borrow's lend or return), and the
  /// other streams keep running while this one is joined. A task blocked for
  /// good (an MPI collective that a lost member never joins fails once the
  /// MPI service gives it up) holds this up until it ends. (crown.shutdown
  /// lets the engines finish first, so that no torch op runs while Python
  /// itself is going.)
  ~StreamThread();
  StreamThread(const StreamThread&) = delete;
  StreamThread& operator=(const StreamThread&) = delete;

  void post(std::function<void()> task);
  /// Waits until every task posted before this call has run.
  void drain();

 private:
  void main();

  const std::size_t bound_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members above
};

/// A one-shot signal between streams (a borrow's lend and return).
class Latch {
 public:
  void set();
  void wait();
  bool isSet();

 private:
  std::mutex mutex_;
  std::condition_variable set_;
  bool done_ = false;
};

}  // namespace crown::tensor::detail
