// Abortable waits (common/abortable.h) and the end of a job whose fault
// nothing handled (supervision/job_end.h). Both are process-wide and once:
// ctest runs each test in a process of its own.
#include "crown/supervision/job_end.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include "crown/actor/future.h"
#include "crown/common/abortable.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<detail::FutureState<int>> pending() {
  return std::make_shared<detail::FutureState<int>>();
}

// Runs `wait` on a thread within an AbortableScope; returns once that
// thread is blocked in an abortable wait.
std::future<std::string> waitingInScope(std::shared_ptr<detail::FutureState<int>> state) {
  std::promise<std::thread::id> id;
  auto started = id.get_future();
  auto waiter = std::async(std::launch::async, [state, &id] {
    AbortableScope scope;
    id.set_value(std::this_thread::get_id());
    try {
      Future<int>(state).get();
      return std::string("returned");
    } catch (const supervision::UnhandledFault& e) {
      return std::string("UnhandledFault: ") + e.what();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  });
  auto thread = started.get();
  auto until = std::chrono::steady_clock::now() + 5s;
  while (!inAbortableWait(thread) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(inAbortableWait(thread));
  return waiter;
}

TEST(AbortableWaits, AnAbortWakesAWaitInProgressAndFailsLaterOnes) {
  auto state = pending();
  auto waiter = waitingInScope(state);
  EXPECT_TRUE(abortWaits(std::make_exception_ptr(Error("the job ends"))));
  EXPECT_FALSE(abortWaits(std::make_exception_ptr(Error("a second abort"))));  // the first wins
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), "the job ends");

  // A later wait in a scope fails at once, also with a deadline.
  AbortableScope scope;
  auto later = pending();
  auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(Future<int>(later).get(10s), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
  // A ready future still gives its value.
  EXPECT_EQ(Future<int>::ready(7).get(), 7);
}

TEST(AbortableWaits, WaitsOutsideAScopeAreNotAborted) {
  auto state = pending();
  auto waiter = std::async(std::launch::async, [state] { return Future<int>(state).get(); });
  std::this_thread::sleep_for(20ms);
  abortWaits(std::make_exception_ptr(Error("the job ends")));
  EXPECT_EQ(waiter.wait_for(100ms), std::future_status::timeout);  // the runtime's own wait
  state->setValue(3);
  EXPECT_EQ(waiter.get(), 3);
}

TEST(JobEnd, TheFirstUnhandledFaultEndsTheJobOnceAndLaterOnesAreOnlyRecorded) {
  std::atomic<int> interrupts{0}, enders{0};
  supervision::setMainInterrupt([&] { ++interrupts; });
  supervision::setJobEnder([&](supervision::FaultClock::time_point) { ++enders; });
  auto waiter = waitingInScope(pending());
  supervision::faultUnhandled("first report");
  supervision::faultUnhandled("second report");
  ASSERT_EQ(waiter.wait_for(5s), std::future_status::ready);
  EXPECT_NE(waiter.get().find("UnhandledFault: "), std::string::npos);
  EXPECT_EQ(interrupts.load(), 1);
  EXPECT_EQ(enders.load(), 1);
  EXPECT_EQ(supervision::unhandledFaults(),
            (std::vector<std::string>{"first report", "second report"}));
}

TEST(JobEnd, AHookThatCannotStartWithinTheGraceLeavesItsFaultUnhandled) {
  ::setenv("CROWN_FAULT_GRACE_MS", "50", 1);
  std::atomic<int> enders{0};
  supervision::setJobEnder([&](supervision::FaultClock::time_point) { ++enders; });
  {
    supervision::HookWatch quick("a hook that starts in time");
    EXPECT_TRUE(quick.start());
  }
  supervision::HookWatch stuck("a hook that never starts");
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(stuck.start());  // too late: it must not run
  EXPECT_EQ(enders.load(), 1);
  EXPECT_EQ(supervision::unhandledFaults(),
            (std::vector<std::string>{"a hook that never starts"}));
}

}  // namespace
}  // namespace crown
