// A transfer's deadline (rdma_module.h), and a step's outcome as an error:
// shared by the reader side's steps (transfer.cpp, staging.cpp).
#pragma once

#include <atomic>
#include <exception>
#include <memory>

#include "crown/actor/future.h"

namespace crown::rdma::detail {

// A transfer's deadline. The future completes only once MPI (or the
// fallback) has let go of the caller's memory, so that memory may be freed
// as soon as the future is done, even after a timeout: a deadline that
// passes before any byte moves fails the future at once; one that passes
// while chunks are in flight stops further chunks, and the future fails
// with the Timeout when those in flight have landed (a few chunks' time).
struct Deadline {
  enum Phase { kAcquiring, kMoving, kExpired };
  std::shared_ptr<std::atomic<bool>> stop = std::make_shared<std::atomic<bool>>(false);
  std::atomic<int> phase{kAcquiring};
  std::exception_ptr error;  // the Timeout, made up front

  /// Moving begins; false when the deadline passed first (end the transfer).
  bool begin() {
    int acquiring = kAcquiring;
    return phase.compare_exchange_strong(acquiring, kMoving) || phase == kMoving;
  }
  /// The transfer has let go of the memory: its outcome.
  void finish(crown::detail::FutureState<void>& user, std::exception_ptr failure) const {
    if (failure) return user.setError(std::move(failure));
    if (stop->load()) return user.setError(error);  // stopped early: not every byte moved
    user.setValue({});
  }
};

/// The failure `done` (ready) ended with; null when it succeeded.
inline std::exception_ptr errorOf(const Future<void>& done) {
  try {
    done.get();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

/// Completes `state` as `done` (ready) ended.
inline void completeAs(crown::detail::FutureState<void>& state, const Future<void>& done) {
  if (auto failure = errorOf(done)) return state.setError(failure);
  state.setValue({});
}

}  // namespace crown::rdma::detail
