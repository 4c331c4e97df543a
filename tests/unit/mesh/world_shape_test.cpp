// The launch's {hosts, procs} shape from the bootstrap topology.
#include <gtest/gtest.h>

#include "crown/common/error.h"
#include "crown/mesh/world_shape.h"

namespace crown::mesh {
namespace {

std::vector<std::string> names(const std::vector<int>& hostOf) {
  std::vector<std::string> out;
  for (int h : hostOf) out.push_back("node" + std::to_string(h));
  return out;
}

TEST(WorldShape, BlocksOfRanksPerHost) {
  std::vector<int> hostOf{0, 0, 0, 0, 1, 1, 1, 1};
  Shape shape = hostsProcsShape(hostOf, names(hostOf));
  EXPECT_EQ(shape.toString(), "{hosts=2, procs=4}");
  EXPECT_EQ(shape.rank({{"hosts", 1}, {"procs", 2}}), 6u);
}

TEST(WorldShape, RoundRobinRanks) {
  std::vector<int> hostOf{0, 1, 2, 0, 1, 2};
  Shape shape = hostsProcsShape(hostOf, names(hostOf));
  EXPECT_EQ(shape.toString(), "{hosts=3, procs=2}");
  for (std::size_t h = 0; h < 3; ++h)
    for (std::size_t p = 0; p < 2; ++p)
      EXPECT_EQ(hostOf[shape.rank({{"hosts", h}, {"procs", p}})], int(h));
}

TEST(WorldShape, OneHostAndOneRank) {
  EXPECT_EQ(hostsProcsShape({0, 0, 0}, names({0, 0, 0})).toString(), "{hosts=1, procs=3}");
  EXPECT_EQ(hostsProcsShape({0}, names({0})).toString(), "{hosts=1, procs=1}");
}

TEST(WorldShape, UnevenHostsSaySoAndOfferTheFlatMesh) {
  std::vector<int> hostOf{0, 0, 0, 1};
  try {
    hostsProcsShape(hostOf, names(hostOf));
    FAIL() << "uneven hosts gave a shape";
  } catch (const ConfigError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("node0: 3, node1: 1"), std::string::npos) << what;
    EXPECT_NE(what.find("worldFlat()"), std::string::npos) << what;
  }
}

TEST(WorldShape, ScatteredRanksSaySo) {
  std::vector<int> hostOf{0, 1, 1, 0};
  EXPECT_THROW(hostsProcsShape(hostOf, names(hostOf)), ConfigError);
}

}  // namespace
}  // namespace crown::mesh
