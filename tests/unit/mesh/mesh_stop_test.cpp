// ActorMesh::stop: every member stops, later messages fail with
// ActorStopped, and nothing of a stopped mesh stays behind on any proc
// (its actors, their points, the order counters towards it).
#include <gtest/gtest.h>
#include <malloc.h>

#include "crown/mesh/sim.h"
#include "mesh/mesh_module.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

struct Hello {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

class Greeter : public Actor {
 public:
  Greeter() : payload_(4096, 'x') {
    handle<Hello>([](const Hello&) { return int(mesh::here().rank); });
  }

 private:
  std::string payload_;  // makes a member that stays behind show in the heap
};

std::size_t hostedMeshActors(mesh::SimulatedWorld& sim) {
  std::size_t hosted = 0;
  for (Rank r = 0; r < sim.size(); ++r)
    hosted += mesh::detail::MeshModule::of(sim.proc(r)).hostedMeshActors();
  return hosted;
}

TEST(MeshStop, StoppedMembersRefuseLaterMessages) {
  mesh::SimulatedWorld sim(8);
  auto greeters = sim.world().spawn<Greeter>("greeter");
  EXPECT_EQ(greeters.call<int>(Hello{}).get(10s).at(5), 5);
  EXPECT_EQ(hostedMeshActors(sim), 8u);
  greeters.stop();
  EXPECT_EQ(hostedMeshActors(sim), 0u);
  auto replies = greeters.call<int>(Hello{}).get(10s);
  ASSERT_EQ(replies.failures().size(), 8u);
  EXPECT_THROW(replies.at(3), ActorStopped);
  // A slice stops its members only, and the others keep taking messages in
  // order (the slice's stop forgets only its members' order counters).
  auto others = sim.world().spawn<Greeter>("others");
  EXPECT_EQ(others.call<int>(Hello{}).get(10s).at(6), 6);
  others.slice({{"procs", mesh::Range{0, 4}}}).stop();
  auto rest = others.call<int>(Hello{}).get(10s);
  EXPECT_EQ(rest.failures().size(), 4u);
  EXPECT_EQ(rest.at(6), 6);
}

// Memory returns near its start after many short-lived meshes: heap bytes
// in use (mallinfo2) after 1,000 spawn/call/stop rounds against after a
// warm-up. A mesh left behind costs 8 members of over 4 KiB each.
TEST(MeshStop, AThousandShortLivedMeshesLeaveNothingBehind) {
  mesh::SimulatedWorld sim(8);
  auto round = [&] {
    auto greeters = sim.world().spawn<Greeter>("short-lived");
    EXPECT_EQ(greeters.call<int>(Hello{}).get(10s).size(), 8u);
    greeters.stop();
  };
  for (int i = 0; i < 50; ++i) round();
  std::size_t before = mallinfo2().uordblks;
  for (int i = 0; i < 1000; ++i) round();
  std::size_t after = mallinfo2().uordblks;
  EXPECT_EQ(hostedMeshActors(sim), 0u);
  EXPECT_LT(after, before + 256 * 1024) << "heap grew by " << (after - before) << " bytes";
}

}  // namespace
}  // namespace crown
