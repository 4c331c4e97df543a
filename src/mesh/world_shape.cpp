#include "crown/mesh/world_shape.h"

#include "crown/common/error.h"

namespace crown::mesh {

Shape hostsProcsShape(const std::vector<int>& hostOfRank,
                      const std::vector<std::string>& hostOfRankNames) {
  const std::string fallback = "; use the 1-D mesh of every rank instead (worldFlat(), {\"ranks\": " +
                               std::to_string(hostOfRank.size()) + "})";
  std::vector<std::vector<std::size_t>> ranksOf;
  for (std::size_t rank = 0; rank < hostOfRank.size(); ++rank) {
    auto host = static_cast<std::size_t>(hostOfRank[rank]);
    if (host >= ranksOf.size()) ranksOf.resize(host + 1);
    ranksOf[host].push_back(rank);
  }
  auto name = [&](std::size_t host) {
    std::size_t first = ranksOf[host].empty() ? hostOfRank.size() : ranksOf[host][0];
    return first < hostOfRankNames.size() ? hostOfRankNames[first] : "host " + std::to_string(host);
  };
  std::size_t hosts = ranksOf.size();
  std::size_t procs = hosts ? ranksOf[0].size() : 0;
  for (std::size_t h = 0; h < hosts; ++h) {
    if (ranksOf[h].size() != procs) {
      std::string counts;
      for (std::size_t i = 0; i < hosts; ++i)
        counts += (i ? ", " : "") + name(i) + ": " + std::to_string(ranksOf[i].size());
      throw ConfigError("the hosts hold different numbers of ranks (" + counts +
                        "), so the launch is no {hosts, procs} mesh" + fallback);
    }
  }
  if (hosts == 0 || procs == 0) throw ConfigError("a launch without ranks has no mesh");
  std::size_t offset = ranksOf[0][0];
  std::size_t procStride = procs > 1 ? ranksOf[0][1] - offset : 1;
  std::size_t hostStride = hosts > 1 ? ranksOf[1][0] - offset : procs * procStride;
  for (std::size_t h = 0; h < hosts; ++h) {
    for (std::size_t p = 0; p < procs; ++p) {
      if (ranksOf[h][p] != offset + h * hostStride + p * procStride) {
        throw ConfigError("the ranks are not spread over the hosts in blocks or round robin (" +
                          name(h) + " holds rank " + std::to_string(ranksOf[h][p]) +
                          " out of step), so the launch is no {hosts, procs} mesh" + fallback);
      }
    }
  }
  return Shape({"hosts", "procs"}, Slice(offset, {hosts, procs}, {hostStride, procStride}));
}

}  // namespace crown::mesh
