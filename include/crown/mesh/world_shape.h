// The shape of a launch: {"hosts": H, "procs": P} from the host of every
// rank, as the bootstrap topology gives it. Any thread.
#pragma once

#include <string>
#include <vector>

#include "crown/mesh/shape.h"

namespace crown::mesh {

/// {"hosts": H, "procs": P}: host h's procs in rank order. Throws ConfigError
/// when the hosts hold different numbers of ranks, or their ranks are not
/// laid out evenly (block or round-robin), saying so and offering the 1-D
/// mesh {"ranks": N} instead. hostOfRankNames (the host name of every rank)
/// names them in the message.
Shape hostsProcsShape(const std::vector<int>& hostOfRank,
                      const std::vector<std::string>& hostOfRankNames);

}  // namespace crown::mesh
