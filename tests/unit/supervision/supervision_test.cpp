// The supervision module: a mesh member that dies (a one-way message's
// handler threw) is reported to the rank that spawned the mesh, once, with
// its rank, host, name and cause; the other members serve on (SIM-1: the
// same code as real ranks, on virtual procs).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <algorithm>
#include <thread>

#include "crown/mesh/module.h"
#include "crown/mesh/point.h"
#include "crown/mesh/proc_mesh.h"
#include "crown/mesh/sim.h"
#include "crown/supervision/job_end.h"
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
  void clear() {
    std::lock_guard lock(mutex_);
    seen_.clear();
  }
  /// A controller's hook that records each report and handles it.
  supervision::FailureHook hook() {
    return [this](const supervision::MemberFailure& failure, const auto&) {
      add(failure);
      return supervision::HookVerdict::kHandled;
    };
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
  supervision::setFailureHook(sim.proc(0), owner.hook());
  for (Rank r = 1; r < 8; ++r)
    supervision::setFailureHook(sim.proc(r), others.hook());
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

// Owners recorded from any context (issue 44): a member whose constructor
// spawns a mesh owns it, and hears of its members' deaths in its own turn.
Reports g_heard;  // what the owners below heard (Supervise), across the sim's procs

struct Nothing {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

class FailsAtBirth : public Actor {
 public:
  FailsAtBirth() { throw std::runtime_error("born broken"); }
};

// Spawns Fragile (or FailsAtBirth) on procs 4..7 from its constructor.
template <bool kHandles, class Child = Fragile>
class InitOwner : public Actor {
 public:
  explicit InitOwner(int lingerMs) {
    ProcMesh procs(mesh::Shape({{"procs", 8}}));
    if constexpr (std::is_same_v<Child, Fragile>) {
      (void)procs.slice({{"procs", mesh::Range{4, 8}}}).spawn<Fragile>("children");
    } else {
      auto spawned = mesh::detail::newMeshLocal(Proc::current());
      using Registration = crown::detail::ActorFactoryRegistration<Child>;
      (void)Registration::registered;
      auto shape = procs.slice({{"procs", mesh::Range{4, 8}}}).shape();
      (void)mesh::detail::startSpawnMesh(shape, {Registration::key(), "children",
                                                 wire::packValues(), spawned, shape});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(lingerMs));  // reports arrive meanwhile
    if constexpr (kHandles) {
      handle<supervision::Supervise>(
          [](const supervision::Supervise& report) { g_heard.add(report.failure); });
    }
    handle<Nothing>([](const Nothing&) { return int(mesh::here().rank); });
  }
};

TEST(Supervision, AFaultTheControllersHookLeavesUnhandledIsRecordedOnceWithItsReport) {
  mesh::SimulatedWorld sim(4, {}, {supervision::supervisionModule()});
  Reports heard;
  bool begun = false;
  supervision::setFailureHook(sim.proc(0), [&](const supervision::MemberFailure& failure,
                                               const std::function<bool()>& begin) {
    begun = begin();  // no job ender in a simulation: nothing to be late for
    heard.add(failure);
    return supervision::HookVerdict::kUnhandled;
  });
  std::size_t before = supervision::unhandledFaults().size();
  auto fragile = sim.world().spawn<Fragile>("unhandled");
  fragile.broadcast(Poke{2});
  auto seen = heard.waitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(begun);
  // The module records it after the hook returns: wait for that.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (supervision::unhandledFaults().size() == before &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  auto faults = supervision::unhandledFaults();
  ASSERT_EQ(faults.size(), before + 1);
  EXPECT_EQ(faults.back(), supervision::describe(seen[0]));
  EXPECT_NE(faults.back().find("actor mesh 'unhandled': the member on rank 2 (sim) died: "),
            std::string::npos)
      << faults.back();
  EXPECT_NE(faults.back().find("member 2 broke"), std::string::npos) << faults.back();
}

TEST(Supervision, AMeshSpawnedInAConstructorIsOwnedByThatMemberWhichHearsInItsTurn) {
  g_heard.clear();
  mesh::SimulatedWorld sim(8, {}, {supervision::supervisionModule()});
  Reports controller;
  supervision::setFailureHook(sim.proc(0), controller.hook());
  auto owner = sim.world().slice({{"procs", 2}}).spawn<InitOwner<true>>("owner", 0);
  // The constructor ran on proc 2, acting for the member: it owns the mesh.
  auto owned = supervision::ownedBy(sim.proc(2), ActorId{2, owner.localId()});
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].name, "children");
  EXPECT_EQ(owned[0].live, (std::vector<Rank>{4, 5, 6, 7}));
  EXPECT_EQ(supervision::ownedBy(sim.proc(2), std::nullopt).size(), 0u);
  ActorMesh<Fragile> children(owned[0].shape, owned[0].mesh);
  children.broadcast(Poke{6});
  auto seen = g_heard.waitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].rank, 6u);
  EXPECT_EQ(seen[0].actor, "children");
  EXPECT_NE(seen[0].cause.find("member 6 broke"), std::string::npos) << seen[0].cause;
  EXPECT_TRUE(controller.waitFor(1, 300ms).empty());  // handled: nothing goes up
  EXPECT_EQ(owner.call<int>(Nothing{}).get(10s).at(0), 2);  // and the owner lives on
  // A stopped slice leaves the record; stopping every member forgets it.
  supervision::membersStopped(sim.proc(2), owned[0].mesh, {4, 5});
  EXPECT_EQ(supervision::ownedMesh(sim.proc(2), owned[0].mesh)->live, (std::vector<Rank>{6, 7}));
  supervision::membersStopped(sim.proc(2), owned[0].mesh, {6, 7});
  EXPECT_FALSE(supervision::ownedMesh(sim.proc(2), owned[0].mesh).has_value());
}

TEST(Supervision, AnOwnerWithoutASuperviseHandlerDiesAndItsOwnerHears) {
  g_heard.clear();
  mesh::SimulatedWorld sim(8, {}, {supervision::supervisionModule()});
  Reports controller;
  supervision::setFailureHook(sim.proc(0), controller.hook());
  auto owner = sim.world().slice({{"procs", 3}}).spawn<InitOwner<false>>("deaf-owner", 0);
  auto owned = supervision::ownedBy(sim.proc(3), ActorId{3, owner.localId()});
  ASSERT_EQ(owned.size(), 1u);
  ActorMesh<Fragile>(owned[0].shape, owned[0].mesh).broadcast(Poke{5});
  auto seen = controller.waitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].actor, "deaf-owner");
  EXPECT_EQ(seen[0].rank, 3u);
  EXPECT_NE(seen[0].cause.find("no handler for message type crown::Supervise"), std::string::npos)
      << seen[0].cause;
  EXPECT_THROW(owner.call<int>(Nothing{}).get(10s).at(0), ActorFailed);
}

TEST(Supervision, ReportsForAnOwnerStillInItsConstructorWaitUntilItIsHosted) {
  g_heard.clear();
  mesh::SimulatedWorld sim(8, {}, {supervision::supervisionModule()});
  Reports controller;
  supervision::setFailureHook(sim.proc(0), controller.hook());
  // Its children fail at birth while it lingers 300 ms in its constructor.
  auto owner =
      sim.world().slice({{"procs", 1}}).spawn<InitOwner<true, FailsAtBirth>>("slow-owner", 300);
  auto seen = g_heard.waitFor(4);
  ASSERT_EQ(seen.size(), 4u);
  for (const auto& failure : seen) {
    EXPECT_EQ(failure.actor, "children");
    EXPECT_NE(failure.cause.find("born broken"), std::string::npos) << failure.cause;
  }
  EXPECT_TRUE(controller.waitFor(1, 300ms).empty());
}

TEST(Supervision, ALostProcIsReportedOncePerMeshWithAMemberOnIt) {
  mesh::SimulatedWorld sim(4, {}, {supervision::supervisionModule()});
  Reports controller;
  supervision::setFailureHook(sim.proc(0), controller.hook());
  auto all = sim.world().spawn<Fragile>("all");
  auto some = sim.world().slice({{"procs", mesh::Range{0, 2}}}).spawn<Fragile>("some");
  (void)some;
  all.broadcast(Poke{3});  // dies first, then its process: one failure
  ASSERT_EQ(controller.waitFor(1).size(), 1u);
  sim.disconnect(3);
  auto seen = controller.waitFor(2, 2s);
  ASSERT_EQ(seen.size(), 1u) << "rank 3's member of 'all' was reported twice";
  sim.disconnect(1);
  seen = controller.waitFor(3);
  ASSERT_EQ(seen.size(), 3u);
  std::vector<std::string> lost{seen[1].actor, seen[2].actor};
  std::sort(lost.begin(), lost.end());
  EXPECT_EQ(lost, (std::vector<std::string>{"all", "some"}));
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(seen[i].rank, 1u);
    EXPECT_NE(seen[i].cause.find("its process was lost"), std::string::npos) << seen[i].cause;
  }
}

TEST(Supervision, TheOwnerRankIsInTheMeshId) {
  EXPECT_EQ(supervision::ownerRank(mesh::kMeshLocalBit | (std::uint64_t{37} << 32) | 5), 37u);
}

}  // namespace
}  // namespace crown
