// Messages of the proc agent (local id 1 on every rank): the controller's
// handle on a process. SpawnActor lives in spawn.h; Shutdown is bootstrap's
// (its lifecycle module).
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

}  // namespace crown::agent
