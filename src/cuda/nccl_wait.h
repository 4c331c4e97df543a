// The wait for an NCCL collective, free of CUDA types so that it is tested
// without a GPU (tests/unit/cuda/nccl_collectives_test.cpp). NCCL reports a
// lost peer or a network failure through ncclCommGetAsyncError while its
// kernels spin, and only ncclCommAbort ends them; a peer that dies without
// NCCL noticing (its socket left open, an InfiniBand path) is never
// reported. So the wait also asks crown's own failure detection about the
// members (DLV-1: no survivor waits for good on a lost rank).
// Called on the engine's thread, one collective at a time.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "crown/common/error.h"

namespace crown::cuda::detail {

struct CollectiveWait {
  /// Whether the collective's stream has finished.
  std::function<bool()> finished;
  /// The device's or NCCL's error text, "" while there is none; asked right
  /// after finished() said no, in the same poll.
  std::function<std::string()> failure;
  /// The group's members (world ranks) and whether crown still hears each.
  const std::vector<Rank>& members;
  std::function<bool(Rank)> alive;
  /// Ends the collective's kernels on this member (ncclCommAbort).
  std::function<void()> abort;
  /// How often the members' liveness is asked (it takes a lock).
  std::chrono::microseconds liveEvery{1000};
};

/// Polls until the collective finishes: spins for 50 µs, then sleeps 20 µs
/// between polls. On an error, aborts once and throws Error with its text;
/// on a member lost, aborts once and throws ProcessLost naming it.
void awaitCollective(const CollectiveWait& wait, const std::string& op);

}  // namespace crown::cuda::detail
