// Messages of the proc agent (local id 1 on every rank): the controller's
// handle on a process. SpawnActor lives in spawn.h.
#pragma once

#include <cstdint>

#include "crown/common/error.h"

namespace crown::agent {

/// Replies with the rank: proves the path to a process works.
struct Ping {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

/// Stops one actor of that process.
struct StopActor {
  std::uint64_t local = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& local;
  }
};

/// The controller is done: the process leaves its serve loop and exits with
/// `code`. `ranksLost`: some rank died, so MPI_Finalize (which waits for every
/// rank) must be skipped.
struct Shutdown {
  int code = 0;
  bool ranksLost = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& code& ranksLost;
  }
};

}  // namespace crown::agent
