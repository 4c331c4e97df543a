// Future<T>: the eventual result of a request. Completed once, by whichever
// thread learns the outcome (the pool thread that read the reply, the failing thread
// for a send failure); waited on by any number of threads.
//
// DLV-1: every future the runtime hands out is completed: with the reply,
// or with a typed error (RemoteError, ProcessLost, Timeout, ActorStopped).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "crown/common/abortable.h"
#include "crown/common/blocking.h"
#include "crown/common/error.h"
#include "crown/common/spin_wait.h"

namespace crown {

namespace detail {

/// What a void handler replies.
struct Unit {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

template <class T>
using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;

template <class T>
class FutureState {
 public:
  void setValue(Stored<T> value) {
    complete([&] { value_.emplace(std::move(value)); });
  }
  void setError(std::exception_ptr error) {
    complete([&] { error_ = std::move(error); });
  }

  bool ready() {
    std::lock_guard lock(mutex_);
    return ready_;
  }

  /// Waits until ready or until `deadline`; true when ready. Within an
  /// AbortableScope (common/abortable.h), throws the abort's error once the
  /// controller program's waits are aborted and the state is not ready.
  bool waitUntil(std::optional<std::chrono::steady_clock::time_point> deadline) {
    // A pool thread does not spin: it may be the one that would read the reply.
    if (blockingHooks() == nullptr &&
        spinUntil([this] { return readyFlag_.load(std::memory_order_acquire); })) {
      return true;
    }
    BlockingScope blocking;  // a pool thread about to block lets its pool compensate
    AbortableWait abortable(mutex_, ready_cv_);  // before the lock: abortable.h's order
    std::unique_lock lock(mutex_);
    auto done = [&] { return ready_ || abortable.aborted(); };
    if (!deadline) {
      ready_cv_.wait(lock, done);
    } else if (!ready_cv_.wait_until(lock, *deadline, done)) {
      return false;
    }
    if (!ready_) abortable.rethrow();
    return true;
  }

  /// Rethrows the error, or returns the value. Only when ready.
  Stored<T> result() {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    return *value_;
  }

  /// Runs `fn` once the state is ready: now, or on the completing thread.
  void onReady(std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      if (!ready_) {
        continuations_.push_back(std::move(fn));
        return;
      }
    }
    fn();
  }

  /// What to do when a waiter gives up (remove the pending request).
  void setCanceller(std::function<void()> cancel) {
    std::lock_guard lock(mutex_);
    cancel_ = std::move(cancel);
  }

  void cancel() {
    std::function<void()> cancel;
    {
      std::lock_guard lock(mutex_);
      cancel.swap(cancel_);
    }
    if (cancel) cancel();
  }

 private:
  template <class Fill>
  void complete(Fill fill) {
    std::vector<std::function<void()>> continuations;
    {
      std::lock_guard lock(mutex_);
      if (ready_) return;  // first outcome wins: a late reply after a timeout is dropped
      fill();
      ready_ = true;
      readyFlag_.store(true, std::memory_order_release);
      cancel_ = nullptr;
      continuations.swap(continuations_);
    }
    ready_cv_.notify_all();
    for (auto& fn : continuations) fn();
  }

  std::mutex mutex_;
  std::condition_variable ready_cv_;
  bool ready_ = false;
  std::atomic<bool> readyFlag_{false};  // ready_, readable without the mutex (spinning waiters)
  std::optional<Stored<T>> value_;
  std::exception_ptr error_;
  std::vector<std::function<void()>> continuations_;
  std::function<void()> cancel_;
};

}  // namespace detail

template <class T>
class Future {
 public:
  using State = detail::FutureState<T>;

  Future() = default;
  explicit Future(std::shared_ptr<State> state) : state_(std::move(state)) {}

  static Future ready(detail::Stored<T> value) {
    auto state = std::make_shared<State>();
    state->setValue(std::move(value));
    return Future(state);
  }
  static Future failed(std::exception_ptr error) {
    auto state = std::make_shared<State>();
    state->setError(std::move(error));
    return Future(state);
  }

  bool valid() const { return state_ != nullptr; }
  bool isReady() const { return state().ready(); }

  /// Waits for the outcome; rethrows a failure (RemoteError, ProcessLost, ...).
  T get() const {
    state().waitUntil(std::nullopt);
    return unwrap();
  }

  /// As get(), but gives up after `timeout`: the request is cancelled (a late
  /// reply is dropped) and crown::Timeout is thrown.
  T get(std::chrono::milliseconds timeout) const {
    if (!state().waitUntil(std::chrono::steady_clock::now() + timeout)) {
      state().cancel();
      state().setError(std::make_exception_ptr(
          Timeout("no reply within " + std::to_string(timeout.count()) + " ms")));
    }
    return unwrap();
  }

  /// Continuation: `fn(Future<T>)` runs once this is ready (at once if it is,
  /// else on the completing thread, which may be a pool thread: keep it short
  /// and never block in it). Returns the future of fn's result.
  template <class Fn>
  auto then(Fn fn) const -> Future<std::invoke_result_t<Fn&, Future<T>>> {
    using U = std::invoke_result_t<Fn&, Future<T>>;
    auto next = std::make_shared<detail::FutureState<U>>();
    Future self = *this;
    state().onReady([self, next, fn = std::move(fn)]() mutable {
      try {
        if constexpr (std::is_void_v<U>) {
          fn(self);
          next->setValue(detail::Unit{});
        } else {
          next->setValue(fn(self));
        }
      } catch (...) {
        next->setError(std::current_exception());
      }
    });
    return Future<U>(next);
  }

  State& state() const {
    CROWN_CHECK(state_ != nullptr, "use of an empty crown::Future");
    return *state_;
  }

 private:
  T unwrap() const {
    if constexpr (std::is_void_v<T>) {
      state().result();
    } else {
      return state().result();
    }
  }

  std::shared_ptr<State> state_;
};

}  // namespace crown
