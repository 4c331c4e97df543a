// The supervision module: a mesh member that dies (a one-way message's
// handler threw) is reported to the rank that spawned the mesh, once, with
// its rank, host, name and cause; the other members serve on (SIM-1: the
// same code as real ranks, on virtual procs).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "crown/mesh/module.h"
#include "crown/mesh/point.h"
#include "crown/mesh/sim.h"
#include "crown/supervision/module.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

struct Poke {
  int failOn = -1;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& failOn;
  }
};

class Fragile : public Actor {
 public:
  Fragile() {
    handle<Poke>([](const Poke& poke) {
      int rank = int(mesh::here().rank);
      if (rank == poke.failOn) throw std::runtime_error("member " + std::to_string(rank) + " broke");
      return rank;
    });
  }
};

class Reports {
 public:
  void add(const supervision::MemberFailure& failure) {
    std::lock_guard lock(mutex_);
    seen_.push_back(failure);
    arrived_.notify_all();
  }
  std::vector<supervision::MemberFailure> waitFor(std::size_t count,
                                                  std::chrono::milliseconds bound = 10s) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, bound, [&] { return seen_.size() >= count; });
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<supervision::MemberFailure> seen_;
};

TEST(Supervision, ADeadMemberIsReportedToTheSpawnersRankOnce) {
  mesh::SimulatedWorld sim(8, {}, {supervision::supervisionModule()});
  Reports owner, others;
  supervision::setFailureHook(sim.proc(0), [&](const auto& f) { owner.add(f); });
  for (Rank r = 1; r < 8; ++r)
    supervision::setFailureHook(sim.proc(r), [&](const auto& f) { others.add(f); });
  auto fragile = sim.world().spawn<Fragile>("fragile");
  EXPECT_EQ(supervision::ownerRank(fragile.localId()), 0u);
  fragile.broadcast(Poke{5});
  auto seen = owner.waitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].mesh, fragile.localId());
  EXPECT_EQ(seen[0].rank, 5u);
  EXPECT_EQ(seen[0].host, "sim");
  EXPECT_EQ(seen[0].actor, "fragile");
  EXPECT_NE(seen[0].cause.find("member 5 broke"), std::string::npos) << seen[0].cause;
  // The dead member refuses with the cause; the others answer.
  auto replies = fragile.call<int>(Poke{}).get(10s);
  ASSERT_EQ(replies.failures().size(), 1u);
  EXPECT_THROW(replies.at(5), ActorFailed);
  EXPECT_EQ(replies.at(6), 6);
  fragile.broadcast(Poke{5});  // refused, not handled: no second death
  EXPECT_EQ(owner.waitFor(2, 500ms).size(), 1u);
  EXPECT_TRUE(others.waitFor(0).empty());
}

TEST(Supervision, TheOwnerRankIsInTheMeshId) {
  EXPECT_EQ(supervision::ownerRank(mesh::kMeshLocalBit | (std::uint64_t{37} << 32) | 5), 37u);
}

}  // namespace
}  // namespace crown
