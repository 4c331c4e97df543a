#include "transport/shm/reader_turns.h"

#include "crown/common/blocking.h"

namespace crown::transport::shm {

std::shared_ptr<ReaderTurns> ReaderTurns::make(Body body, std::function<void()> onBusy) {
  return std::shared_ptr<ReaderTurns>(new ReaderTurns(std::move(body), std::move(onBusy)));
}

void ReaderTurns::run() {
  std::lock_guard lock(mutex_);
  if (threads_.empty() && !ended_) launch();
}

ReaderTurns::ReaderTurns(Body body, std::function<void()> onBusy)
    : body_(std::move(body)), onBusy_(std::move(onBusy)) {}

void ReaderTurns::launch() {
  ++live_;
  threads_.emplace_back([self = shared_from_this()] { self->threadMain(); });
}

void ReaderTurns::threadMain() {
  t_owner = this;
  // A handler about to block hands the reading on first: the reply it
  // waits for may come on this very ring.
  detail::BlockingHooks hooks{[](void* turns) { static_cast<ReaderTurns*>(turns)->relieve(); },
                              [](void*) {}, this};
  detail::setBlockingHooks(&hooks);
  std::unique_lock lock(mutex_);
  while (!ended_) {
    t_turn = turn_;
    lock.unlock();
    bool linkEnded = body_();
    lock.lock();
    if (linkEnded) {
      ended_ = true;
      spareCv_.notify_all();
      break;
    }
    // Relieved: a spare until the reader of the day is relieved in turn.
    ++spares_;
    spareCv_.wait(lock, [this] { return ended_ || calls_ > 0; });
    --spares_;
    if (!ended_) --calls_;
  }
  detail::setBlockingHooks(nullptr);
  --live_;
  exitedCv_.notify_all();
}

void ReaderTurns::beginInline() {
  {
    std::lock_guard lock(mutex_);
    inlineSince_ = Clock::now();
  }
  if (onBusy_) onBusy_();
}

bool ReaderTurns::endInline() {
  std::lock_guard lock(mutex_);
  if (t_turn != turn_ || ended_) return false;
  inlineSince_.reset();
  return true;
}

void ReaderTurns::relieve(std::optional<Clock::time_point> since) {
  std::lock_guard lock(mutex_);
  if (ended_ || !inlineSince_ || (since && *inlineSince_ > *since)) return;
  // Called on the holder's own thread (BlockingScope) or by the watch: either
  // way the holder is inside a handler, and does not read until it returns.
  ++turn_;
  inlineSince_.reset();
  if (spares_ > calls_) {
    ++calls_;
    spareCv_.notify_one();
  } else {
    launch();
  }
}

std::optional<ReaderTurns::Clock::time_point> ReaderTurns::inlineSince() const {
  std::lock_guard lock(mutex_);
  return inlineSince_;
}

void ReaderTurns::stop(std::chrono::milliseconds bound) {
  std::vector<std::thread> threads;
  {
    std::unique_lock lock(mutex_);
    ended_ = true;
    spareCv_.notify_all();
    // From a handler on one of these threads (a Proc stopped from a
    // handler): that thread ends once the handler returns.
    int own = t_owner == this ? 1 : 0;
    exitedCv_.wait_for(lock, bound, [this, own] { return live_ == own; });
    threads.swap(threads_);
    if (live_ > own) {  // one still in a handler: it keeps this object alive, and ends with it
      for (auto& thread : threads) thread.detach();
      return;
    }
  }
  for (auto& thread : threads) {
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
}

std::size_t ReaderTurns::threads() const {
  std::lock_guard lock(mutex_);
  return threads_.size();
}

int ReaderTurns::spares() const {
  std::lock_guard lock(mutex_);
  return spares_;
}

}  // namespace crown::transport::shm
