#include <gtest/gtest.h>

#include <thread>

#include "crown/actor/future.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

TEST(Future, GetWaitsForAnotherThread) {
  auto state = std::make_shared<detail::FutureState<int>>();
  Future<int> future(state);
  std::thread completer([state] {
    std::this_thread::sleep_for(20ms);
    state->setValue(5);
  });
  EXPECT_EQ(future.get(), 5);
  completer.join();
}

TEST(Future, TheFirstOutcomeWins) {
  auto state = std::make_shared<detail::FutureState<int>>();
  state->setValue(1);
  state->setError(std::make_exception_ptr(Timeout("late")));
  EXPECT_EQ(Future<int>(state).get(), 1);
}

TEST(Future, ErrorsAreRethrownWithTheirType) {
  auto future =
      Future<void>::failed(std::make_exception_ptr(ProcessLost(2, "node7", "link reset")));
  try {
    future.get();
    FAIL();
  } catch (const ProcessLost& e) {
    EXPECT_EQ(e.rank(), 2u);
    EXPECT_EQ(e.host(), "node7");
  }
}

TEST(Future, TimeoutRunsTheCanceller) {
  auto state = std::make_shared<detail::FutureState<int>>();
  bool cancelled = false;
  state->setCanceller([&] { cancelled = true; });
  EXPECT_THROW(Future<int>(state).get(10ms), Timeout);
  EXPECT_TRUE(cancelled);
}

TEST(Future, ThenChainsAndPropagatesErrors) {
  auto ok = Future<int>::ready(20).then([](Future<int> f) { return f.get() + 1; });
  EXPECT_EQ(ok.get(), 21);
  auto bad = Future<int>::failed(std::make_exception_ptr(Timeout("t"))).then([](Future<int> f) {
    return f.get();
  });
  EXPECT_THROW(bad.get(), Timeout);
}

TEST(Future, AnEmptyFutureSaysSo) { EXPECT_THROW(Future<int>().get(), Error); }

}  // namespace
}  // namespace crown
