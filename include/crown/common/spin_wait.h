// Brief spinning before a blocking wait. A thread about to sleep on a
// condition variable first polls for up to CROWN_SPIN_US microseconds
// (default 50; 0 turns spinning off), yielding the core each round so a
// thread that must run to satisfy the condition is not starved. On the
// request/reply path this saves the futex wake-up and reschedule that would
// otherwise sit on both ends of every round trip.
#pragma once

#include <sched.h>
#include <chrono>

namespace crown::detail {

/// The spin budget, read once from CROWN_SPIN_US.
std::chrono::microseconds spinBudget();

/// Polls `ready` until it returns true (then true) or the budget is spent (false).
template <class Ready>
bool spinUntil(Ready ready) {
  static const auto budget = spinBudget();
  if (budget.count() == 0) return ready();
  auto deadline = std::chrono::steady_clock::now() + budget;
  do {
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
      sched_yield();
    }
  } while (std::chrono::steady_clock::now() < deadline);
  return ready();
}

}  // namespace crown::detail
