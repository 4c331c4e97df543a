// What the RDMA tests on real ranks share (rdma_test.cpp, rdma_device_test.cpp):
// the byte pattern buffers are filled with, which transport ctest asked for,
// stopping an actor through its proc's agent, and waiting for counters that
// settle after a future completes.
#pragma once

#include <crown/actor/agent.h>

#include <chrono>
#include <thread>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "support/mpi_harness.h"

namespace crown::testing {

inline std::uint8_t patternAt(std::size_t i, std::uint8_t seed) {
  return static_cast<std::uint8_t>(i * 131 + seed + (i >> 16));
}

// One-sided MPI is in use unless ctest ran the fallback (CROWN_RDMA_WINDOW=0
// with CROWN_TEST_EXPECT_WINDOW=0).
inline bool expectWindow() {
  const char* v = std::getenv("CROWN_TEST_EXPECT_WINDOW");
  return v == nullptr || std::string(v) != "0";
}

inline void stopActor(const ActorId& id) {
  using namespace std::chrono_literals;
  Proc::current().request<void>({id.rank, kAgentLocalId}, agent::StopActor{id.local}).get(10s);
}

// The first value of `read()` that `settled` accepts, or the last one read
// after 10 s. Some counters move just after the future the test waited on:
// a deadline is cancelled by the transfer's continuation, which runs after
// the waiter wakes; a dropped region leaves the window on the pool.
template <class Read, class Settled>
auto eventually(Read read, Settled settled) {
  using namespace std::chrono_literals;
  auto giveUp = std::chrono::steady_clock::now() + 10s;
  auto value = read();
  while (!settled(value) && std::chrono::steady_clock::now() < giveUp) {
    std::this_thread::sleep_for(2ms);
    value = read();
  }
  return value;
}

}  // namespace crown::testing
