// Proc::Module: a layer plugs into every Proc through install/start/stop
// and the Proc's events, with system ids from the allocator (the same on
// every proc) and per-Proc state of its own.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "crown/actor/agent.h"
#include "crown/actor/module.h"
#include "crown/actor/spawn.h"
#include "crown/transport/local.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

struct Echo {
  int n = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& n;
  }
};

// Records what the Proc told it, and answers Echo at a raw agent of its own.
class Recorder : public Proc::Module {
 public:
  void install(Proc& proc, SystemIds& ids) override {
    proc_ = &proc;
    agent = ids.claim();
    proc.setRawAgent(agent, [this](wire::Envelope&& envelope, wire::Bytes&& bytes) {
      proc_->reply(envelope, wire::messageName<int>(),
                   wire::toBytes(wire::fromBytes<Echo>(bytes).n + int(proc_->rank())));
    });
    note("install");
  }
  void start() override { note("start"); }
  void stop() override { note("stop"); }
  void peerLost(Rank peer, const std::string&) override { note("lost " + std::to_string(peer)); }
  void actorStopped(std::uint64_t local) override { note("stopped " + std::to_string(local)); }
  void actorFailed(const ActorId&, const std::string& name, const std::string& what) override {
    note("failed " + name + ": " + what);
  }

  std::vector<std::string> events() {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::uint64_t agent = 0;

 private:
  void note(std::string event) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  Proc* proc_ = nullptr;
  std::mutex mutex_;
  std::vector<std::string> events_;
};

class Idle : public Actor {};

class Grumpy : public Actor {
 public:
  Grumpy() {
    handle<Echo>([](const Echo& echo) -> int { throw std::domain_error("no " + std::to_string(echo.n)); });
  }
};

class Greedy : public Proc::Module {
 public:
  void install(Proc&, SystemIds& ids) override {
    for (;;) ids.claim();
  }
};

class ModuleTest : public ::testing::Test {
 protected:
  void boot(Rank size, std::vector<Proc::ModuleFactory> modules) {
    pool_ = std::make_shared<transport::IoPool>();
    hub_ = transport::makeLocalHub(pool_, size);
    for (Rank r = 0; r < size; ++r) {
      Proc::Options options{r, size, nullptr, pool_, /*stopsPool=*/false, modules};
      procs_.push_back(std::make_unique<Proc>(options, transport::makeLocalTransport(hub_, r),
                                              std::vector<std::string>(size)));
    }
  }
  void TearDown() override {
    for (auto& proc : procs_) proc->stop(0ms);
    if (pool_) pool_->stop();
    procs_.clear();
  }

  std::shared_ptr<transport::IoPool> pool_;
  std::shared_ptr<transport::LocalHub> hub_;
  std::vector<std::unique_ptr<Proc>> procs_;
};

Proc::ModuleFactory recorder() {
  return [] { return std::make_unique<Recorder>(); };
}

TEST_F(ModuleTest, EachProcOwnsItsModulesWhichClaimTheSameIdsEverywhere) {
  boot(3, {recorder(), recorder()});
  std::vector<Recorder*> first;
  for (auto& proc : procs_) {
    ASSERT_EQ(proc->modules().size(), 2u);
    first.push_back(proc->findModule<Recorder>());
  }
  EXPECT_NE(first[0], first[1]);  // one instance per Proc: state is never shared
  auto* second = dynamic_cast<Recorder*>(procs_[2]->modules()[1]);
  EXPECT_EQ(first[2]->agent, kFlowAgentLocalId + 1);  // the first id the kernel does not keep
  EXPECT_EQ(second->agent, kFlowAgentLocalId + 2);
  for (Recorder* module : first) EXPECT_EQ(module->agent, first[0]->agent);
  // A peer's agent is reached by the id the local module claimed.
  EXPECT_EQ(procs_[0]->request<int>({2, first[0]->agent}, Echo{40}).get(5s), 42);
  EXPECT_EQ(procs_[0]->request<int>({1, second->agent}, Echo{40}).get(5s), 41);
  EXPECT_EQ(first[0]->events(), (std::vector<std::string>{"install", "start"}));
}

TEST_F(ModuleTest, ModulesHearOfStoppedActorsLostPeersAndTheProcStopping) {
  boot(3, {recorder()});
  ActorId idle = procs_[1]->spawnLocal(std::make_unique<Idle>(), "idle");
  procs_[1]->stopLocal(idle.local);
  transport::disconnect(*hub_, 2);
  auto* module = procs_[1]->findModule<Recorder>();
  for (int i = 0; i < 500 && module->events().size() < 4; ++i) std::this_thread::sleep_for(2ms);
  procs_[1]->stop(0ms);
  EXPECT_EQ(module->events(),
            (std::vector<std::string>{"install", "start", "stopped " + std::to_string(idle.local),
                                      "lost 2", "stop"}));
}

// A one-way message whose handler throws has no caller to tell: the actor
// dies (design.md's failure model) and the modules hear of it (the
// supervision path); a request's failure goes to its caller only, and the
// actor lives on.
TEST_F(ModuleTest, ModulesHearOfHandlersThatFailWithNobodyToTell) {
  boot(2, {recorder()});
  ActorId grumpy = procs_[1]->spawnLocal(std::make_unique<Grumpy>(), "grumpy");
  EXPECT_THROW(procs_[0]->request<int>(grumpy, Echo{1}).get(5s), RemoteError);
  procs_[0]->send(grumpy, Echo{2});
  auto* module = procs_[1]->findModule<Recorder>();
  for (int i = 0; i < 500 && module->events().size() < 4; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(module->events(),
            (std::vector<std::string>{"install", "start", "stopped " + std::to_string(grumpy.local),
                                      "failed grumpy: std::domain_error: no 2"}));
}

class Fatal : public Actor {
 public:
  Fatal() {
    handle<Echo>([](const Echo& echo) -> int {
      if (echo.n < 0) throw ActorFatal("SystemExit: " + std::to_string(-echo.n));
      return echo.n;
    });
  }
};

// A dead actor refuses what waited in its mailbox and everything sent later
// with ActorFailed naming the cause (DLV-1: nothing waits for it).
TEST_F(ModuleTest, ADeadActorRefusesWaitingAndLaterMessagesWithTheCause) {
  boot(2, {recorder()});
  ActorId grumpy = procs_[1]->spawnLocal(std::make_unique<Grumpy>(), "grumpy");
  procs_[0]->send(grumpy, Echo{7});
  std::vector<Future<int>> queued;
  for (int i = 0; i < 50; ++i) queued.push_back(procs_[0]->request<int>(grumpy, Echo{i}));
  for (auto& future : queued) {
    try {
      future.get(5s);
      FAIL() << "a request to a dead actor was answered";
    } catch (const ActorFailed& e) {
      EXPECT_EQ(e.rank(), 1u);
      EXPECT_EQ(e.actor(), "grumpy");
      EXPECT_EQ(e.cause(), "std::domain_error: no 7");
    }
  }
  EXPECT_THROW(procs_[0]->request<int>(grumpy, Echo{1}).get(5s), ActorFailed);
}

// ActorFatal kills the actor under a request too; the request says so.
TEST_F(ModuleTest, AFatalHandlerKillsItsActorAndFailsItsRequest) {
  boot(2, {recorder()});
  ActorId fatal = procs_[1]->spawnLocal(std::make_unique<Fatal>(), "fatal");
  EXPECT_EQ(procs_[0]->request<int>(fatal, Echo{5}).get(5s), 5);
  try {
    procs_[0]->request<int>(fatal, Echo{-3}).get(5s);
    FAIL() << "a fatal handler answered";
  } catch (const ActorFailed& e) {
    EXPECT_EQ(e.cause(), "SystemExit: 3");  // the report as the user wrote it: no C++ type
  }
  EXPECT_THROW(procs_[0]->request<int>(fatal, Echo{5}).get(5s), ActorFailed);
  auto* module = procs_[1]->findModule<Recorder>();
  for (int i = 0; i < 500 && module->events().size() < 4; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(module->events().back(), "failed fatal: SystemExit: 3");
}

// System agents serve on whatever a one-way message to them does.
TEST_F(ModuleTest, TheProcAgentSurvivesAFailingOneWayMessage) {
  boot(2, {recorder()});
  procs_[0]->send(ActorId{1, kAgentLocalId}, Echo{1});  // it has no handler for Echo
  auto* module = procs_[1]->findModule<Recorder>();
  for (int i = 0; i < 500 && module->events().size() < 3; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(module->events().size(), 3u);
  EXPECT_NE(module->events()[2].find("failed"), std::string::npos);
  EXPECT_EQ(procs_[0]->request<Rank>(ActorId{1, kAgentLocalId}, agent::Ping{}).get(5s), 1u);
}

TEST_F(ModuleTest, AModuleClaimingTooManyIdsFailsTheProcClearly) {
  try {
    boot(1, {[] { return std::make_unique<Greedy>(); }});
    FAIL() << "the system id range was exceeded silently";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("system ids"), std::string::npos) << e.what();
  }
}

TEST_F(ModuleTest, RawAgentsAreSetOnlyWhileModulesInstall) {
  boot(1, {});
  EXPECT_EQ(procs_[0]->findModule<Recorder>(), nullptr);
  EXPECT_THROW(procs_[0]->setRawAgent(5, [](wire::Envelope&&, wire::Bytes&&) {}), Error);
}

}  // namespace
}  // namespace crown
