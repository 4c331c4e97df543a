// The wait for an NCCL collective (nccl_wait.h).
#include "cuda/nccl_wait.h"

#include <thread>

namespace crown::cuda::detail {

void awaitCollective(const CollectiveWait& wait, const std::string& op) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto spinUntil = start + std::chrono::microseconds(50);
  auto askLiveAt = start + wait.liveEvery;
  for (;;) {
    if (wait.finished()) return;
    if (std::string why = wait.failure(); !why.empty()) {
      wait.abort();
      throw Error(op + " failed: " + why);
    }
    const auto now = Clock::now();
    if (now >= askLiveAt) {
      askLiveAt = now + wait.liveEvery;
      for (Rank member : wait.members) {
        if (wait.alive(member)) continue;
        wait.abort();  // ends this member's kernels, which wait on the lost one
        throw ProcessLost(member, "", "lost during " + op + "; its NCCL communicator was aborted");
      }
    }
    if (now < spinUntil) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace crown::cuda::detail
