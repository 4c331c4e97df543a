// Actors on a Proc of one rank: every send takes the in-process path, the
// same mailboxes and thread pool as remote messages.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "crown/actor/agent.h"
#include "crown/actor/spawn.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

struct Add {
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& value;
  }
};
struct Get {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Boom {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Sleep {
  int ms = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ms;
  }
};
struct Forward {
  ActorRef<> target;
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& target& value;
  }
};

// Records the order in which values arrive.
class Recorder : public Actor {
 public:
  explicit Recorder(int start) {
    seen_.push_back(start);
    handle<Add>([this](const Add& add) { seen_.push_back(add.value); });
    handle<Get>([this](const Get&) { return seen_; });
    handle<Boom>([](const Boom&) -> int { throw std::out_of_range("boom"); });
    handle<Sleep>([](const Sleep& sleep) {
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep.ms));
    });
    handle<Forward>([](const Forward& forward) {
      return forward.target.call<std::vector<int>>(Get{}).get().size();
    });
  }

 private:
  std::vector<int> seen_;
};

class Broken : public Actor {
 public:
  Broken() { throw std::runtime_error("cannot construct"); }
};

// Its first turn (Actor::onStart) waits for the gate: a constructor that
// blocks. What it saw first is recorded, to show it ran before any message.
struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool open = false;
  void wait() {
    std::unique_lock lock(mutex);
    opened.wait(lock, [this] { return open; });
  }
  void set(bool value) {
    {
      std::lock_guard lock(mutex);
      open = value;
    }
    opened.notify_all();
  }
};
Gate g_gate;

class SlowStarter : public Actor {
 public:
  explicit SlowStarter(bool fail) {
    onStart([this, fail] {
      g_gate.wait();
      if (fail) throw std::runtime_error("start failed");
      seen_.push_back(-1);
    });
    handle<Add>([this](const Add& add) { seen_.push_back(add.value); });
    handle<Get>([this](const Get&) { return seen_; });
  }

 private:
  std::vector<int> seen_;
};

class ActorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport::AsioOptions options;
    options.bindAddress = "127.0.0.1";
    options.secret = transport::randomSecret();
    options.pool = std::make_shared<transport::IoPool>();
    auto fabric = transport::makeAsioTransport(options);
    auto self = fabric->address();
    proc_ = std::make_unique<Proc>(Proc::Options{0, 1, std::make_shared<const std::vector<std::string>>(1, "localhost"),
                                 options.pool},
                                   std::move(fabric), std::vector<std::string>{self});
  }
  void TearDown() override { proc_.reset(); }

  std::unique_ptr<Proc> proc_;
};

TEST_F(ActorTest, TenThousandMessagesAreHandledInSendOrder) {
  auto recorder = spawnOn<Recorder>(0, "recorder", -1).get();
  constexpr int kCount = 10000;
  for (int i = 0; i < kCount; ++i) recorder.send(Add{i});
  auto seen = recorder.call<std::vector<int>>(Get{}).get(10s);  // ORD-1: after every Add
  ASSERT_EQ(seen.size(), kCount + 1u);
  EXPECT_EQ(seen[0], -1);  // the constructor argument
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(seen[i + 1], i);
}

TEST_F(ActorTest, AThrowingHandlerFailsOnlyThatRequest) {
  auto recorder = spawnOn<Recorder>(0, "recorder", 0).get();
  try {
    recorder.call<int>(Boom{}).get();
    FAIL() << "the exception did not reach the caller";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.remoteType(), "std::out_of_range");
    EXPECT_EQ(e.remoteMessage(), "boom");
    EXPECT_EQ(e.rank(), 0u);
    EXPECT_EQ(e.actor(), "recorder");
  }
  recorder.send(Add{5});
  EXPECT_EQ(recorder.call<std::vector<int>>(Get{}).get(),
            (std::vector<int>{0, 5}));  // still serving
}

TEST_F(ActorTest, AnUnknownMessageTypeIsARemoteError) {
  auto recorder = spawnOn<Recorder>(0, "recorder", 0).get();
  try {
    recorder.call<int>(agent::Ping{}).get();
    FAIL();
  } catch (const RemoteError& e) {
    EXPECT_NE(e.remoteMessage().find("no handler for message type crown::agent::Ping"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ActorTest, AWrongReplyTypeIsReported) {
  auto recorder = spawnOn<Recorder>(0, "recorder", 0).get();
  EXPECT_THROW(recorder.call<std::string>(Get{}).get(), ProtocolError);
}

TEST_F(ActorTest, AConstructorThatThrowsFailsTheSpawn) {
  try {
    spawnOn<Broken>(0, "broken").get();
    FAIL();
  } catch (const RemoteError& e) {
    EXPECT_NE(e.remoteMessage().find("cannot construct"), std::string::npos) << e.what();
  }
}

TEST_F(ActorTest, GetWithTimeoutThrowsTimeoutAndDropsTheLateReply) {
  auto recorder = spawnOn<Recorder>(0, "recorder", 0).get();
  auto slow = recorder.call<void>(Sleep{300});
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(slow.get(50ms), Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 250ms);
  EXPECT_THROW(slow.get(), Timeout);  // the outcome stays the timeout
  EXPECT_EQ(recorder.call<std::vector<int>>(Get{}).get(5s).size(), 1u);
}

TEST_F(ActorTest, ActorsCallActorsThroughRefsInMessages) {
  auto a = spawnOn<Recorder>(0, "a", 0).get();
  auto b = spawnOn<Recorder>(0, "b", 0).get();
  b.send(Add{1});
  b.send(Add{2});
  EXPECT_EQ(a.call<std::size_t>(Forward{ActorRef<>(b.id()), 0}).get(5s), 3u);
}

TEST_F(ActorTest, SlowActorDoesNotStallOthers) {
  auto slow = spawnOn<Recorder>(0, "slow", 0).get();
  auto fast = spawnOn<Recorder>(0, "fast", 0).get();
  auto sleeping = slow.call<void>(Sleep{1000});
  auto start = std::chrono::steady_clock::now();
  fast.call<std::vector<int>>(Get{}).get(5s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
  sleeping.get(5s);
}

TEST_F(ActorTest, AStoppedActorFailsLaterRequests) {
  auto recorder = spawnOn<Recorder>(0, "recorder", 0).get();
  Proc::current().request<void>({0, kAgentLocalId}, agent::StopActor{recorder.id().local}).get(5s);
  EXPECT_THROW(recorder.call<std::vector<int>>(Get{}).get(5s), ActorStopped);
}

TEST_F(ActorTest, ContinuationsRunWithTheReply) {
  auto recorder = spawnOn<Recorder>(0, "recorder", 7).get();
  auto size = recorder.call<std::vector<int>>(Get{}).then(
      [](Future<std::vector<int>> f) { return f.get().front(); });
  EXPECT_EQ(size.get(5s), 7);
}

TEST_F(ActorTest, ARankOutsideTheJobIsAnError) {
  EXPECT_THROW(Proc::current().request<Rank>({5, kAgentLocalId}, agent::Ping{}).get(5s),
               ConfigError);
}

TEST_F(ActorTest, AFirstTurnRunsBeforeAnyMessageAndHoldsUpOnlyItsActor) {
  g_gate.set(false);
  auto starter = spawnOn<SlowStarter>(0, "starter", false).get(5s);  // hosted: not waiting
  starter.send(Add{1});
  auto seen = starter.call<std::vector<int>>(Get{});
  auto other = spawnOn<Recorder>(0, "other", 0).get(5s);
  EXPECT_EQ(other.call<std::vector<int>>(Get{}).get(5s), std::vector<int>{0});
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(seen.isReady());  // behind the first turn
  g_gate.set(true);
  EXPECT_EQ(seen.get(5s), (std::vector<int>{-1, 1}));
}

TEST_F(ActorTest, AFirstTurnThatThrowsKillsTheActorWithItsCause) {
  g_gate.set(true);
  auto starter = spawnOn<SlowStarter>(0, "starter", true).get(5s);
  try {
    starter.call<std::vector<int>>(Get{}).get(5s);
    FAIL() << "a dead actor answered";
  } catch (const ActorFailed& e) {
    EXPECT_NE(std::string(e.what()).find("start failed"), std::string::npos) << e.what();
  }
}

TEST_F(ActorTest, StopLocalIfStartingStopsOnlyAnActorStillInItsFirstTurn) {
  g_gate.set(false);
  auto stuck = spawnOn<SlowStarter>(0, "stuck", false).get(5s);
  auto waiting = stuck.call<std::vector<int>>(Get{});
  EXPECT_TRUE(proc_->stopLocalIfStarting(stuck.id().local));
  EXPECT_THROW(waiting.get(5s), ActorStopped);  // refused at once, not after the gate
  g_gate.set(true);
  auto started = spawnOn<SlowStarter>(0, "started", false).get(5s);
  EXPECT_EQ(started.call<std::vector<int>>(Get{}).get(5s), std::vector<int>{-1});
  EXPECT_FALSE(proc_->stopLocalIfStarting(started.id().local));
  EXPECT_EQ(started.call<std::vector<int>>(Get{}).get(5s), std::vector<int>{-1});  // serving
}

TEST(ActorRefTest, SerializesAsItsAddress) {
  ActorRef<Recorder> ref(ActorId{3, 44});
  auto back = wire::fromBytes<ActorRef<Recorder>>(wire::toBytes(ref));
  EXPECT_EQ(back, ref);
  EXPECT_EQ(back.rank(), 3u);
}

}  // namespace
}  // namespace crown
