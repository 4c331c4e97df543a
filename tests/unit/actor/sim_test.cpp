// SIM-1: many virtual procs in one process, on the in-process transport,
// running the same Proc, agents and routing code as real ranks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>

#include "crown/actor/spawn.h"
#include "crown/transport/local.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

struct Who {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Note {
  int sender = 0;
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sender& value;
  }
};
struct Notes {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Bulky {
  std::string bytes;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& bytes;
  }
};
struct Flood {
  ActorRef<> target;
  int count = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& target& count;
  }
};
struct Doze {
  int ms = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ms;
  }
};

class Member : public Actor {
 public:
  Member() {
    handle<Who>([this](const Who&) { return rank(); });
    handle<Note>([this](const Note& note) { notes_.emplace_back(note.sender, note.value); });
    handle<Notes>([this](const Notes&) { return notes_; });
    handle<Flood>([this](const Flood& flood) {
      for (int i = 0; i < flood.count; ++i) flood.target.send(Note{static_cast<int>(rank()), i});
      flood.target.call<std::vector<std::pair<int, int>>>(Notes{}).get();  // ORD-1: after them
    });
    handle<Doze>([this](const Doze& doze) {
      std::this_thread::sleep_for(std::chrono::milliseconds(doze.ms));
      return rank();
    });
  }

 private:
  std::vector<std::pair<int, int>> notes_;
};

class SimTest : public ::testing::Test {
 protected:
  void boot(Rank size, wire::FrameLimits limits = {}) {
    pool_ = std::make_shared<transport::IoPool>();
    hub_ = transport::makeLocalHub(pool_, size, limits);
    auto hosts = std::make_shared<const std::vector<std::string>>(size, "sim");
    std::vector<std::string> peers(size);
    for (Rank r = 0; r < size; ++r) {
      Proc::Options options{r, size, hosts, pool_, /*stopsPool=*/false};
      procs_.push_back(
          std::make_unique<Proc>(options, transport::makeLocalTransport(hub_, r), peers));
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

TEST_F(SimTest, EveryVirtualProcSpawnsAndAnswers) {
  constexpr Rank kProcs = 256;
  boot(kProcs);
  std::vector<Future<ActorRef<Member>>> spawns;
  for (Rank r = 0; r < kProcs; ++r) spawns.push_back(spawnOn<Member>(r, "member"));
  std::vector<Future<Rank>> answers;
  for (auto& spawn : spawns) answers.push_back(spawn.get(10s).call<Rank>(Who{}));
  for (Rank r = 0; r < kProcs; ++r) EXPECT_EQ(answers[r].get(10s), r);
}

TEST_F(SimTest, MessagesFromEachSenderArriveInOrder) {
  boot(5);
  std::vector<ActorRef<Member>> members;
  for (Rank r = 0; r < 5; ++r) members.push_back(spawnOn<Member>(r, "member").get(10s));
  ActorRef<> target(members[4].id());
  constexpr int kCount = 2000;
  std::vector<Future<void>> floods;
  for (Rank r = 1; r <= 3; ++r) floods.push_back(members[r].call<void>(Flood{target, kCount}));
  for (int i = 0; i < kCount; ++i) target.send(Note{0, i});
  for (auto& flood : floods) flood.get(30s);
  auto notes = members[4].call<std::vector<std::pair<int, int>>>(Notes{}).get(30s);
  ASSERT_EQ(notes.size(), 4u * kCount);
  std::map<int, int> next;
  for (auto [sender, value] : notes) ASSERT_EQ(value, next[sender]++) << "from rank " << sender;
}

TEST_F(SimTest, ADisconnectedProcFailsItsRequestsAndTheRestServeOn) {
  boot(8);
  std::vector<ActorRef<Member>> members;
  for (Rank r = 0; r < 8; ++r) members.push_back(spawnOn<Member>(r, "member").get(10s));
  auto inFlight = members[5].call<Rank>(Doze{500});
  std::this_thread::sleep_for(50ms);
  transport::disconnect(*hub_, 5);
  EXPECT_THROW(inFlight.get(1s), ProcessLost);
  EXPECT_THROW(members[5].call<Rank>(Who{}).get(1s), ProcessLost);
  for (Rank r : {1u, 4u, 6u, 7u}) EXPECT_EQ(members[r].call<Rank>(Who{}).get(5s), r);
}

// DLV-1 tells a refused frame from a lost peer: a message over the frame
// limit fails its request with ProtocolError, and its peer lives on. (Its
// ORD-1 position was taken, so the peer's next message from this sender
// waits out the order gap timeout, shortened here.)
TEST_F(SimTest, AFrameRefusedAsBadFailsItsRequestButNotThePeer) {
  wire::FrameLimits limits;
  limits.maxPayloadBytes = 4096;
  setenv("CROWN_ORDER_GAP_TIMEOUT_MS", "100", 1);
  boot(2, limits);
  unsetenv("CROWN_ORDER_GAP_TIMEOUT_MS");
  auto member = spawnOn<Member>(1, "member").get(10s);
  auto tooBig = member.call<void>(Bulky{std::string(8192, 'x')});
  try {
    tooBig.get(5s);
    FAIL() << "a frame over the limit was delivered";
  } catch (const ProcessLost& e) {
    FAIL() << "a refused frame was taken for a lost process: " << e.what();
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("bad frame"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(Proc::current().alive(1));
  EXPECT_EQ(member.call<Rank>(Who{}).get(5s), 1u);
}

// An executor that keeps what it is given once frozen and never runs it:
// a stopped pool whose queue outlives the Procs that posted to it.
class FreezableExecutor : public Executor {
 public:
  explicit FreezableExecutor(std::shared_ptr<Executor> inner) : inner_(std::move(inner)) {}
  void freeze() { frozen_ = true; }
  std::size_t kept() {
    std::lock_guard lock(mutex_);
    return kept_.size();
  }
  void start() override { inner_->start(); }
  void post(std::function<void()> task) override {
    if (!keep(task)) inner_->post(std::move(task));
  }
  void defer(std::function<void()> task) override {
    if (!keep(task)) inner_->defer(std::move(task));
  }
  void after(std::chrono::milliseconds delay, std::function<void()> task) override {
    if (!keep(task)) inner_->after(delay, std::move(task));
  }
  void stop() override { inner_->stop(); }
  bool inPool() const override { return inner_->inPool(); }

 private:
  bool keep(std::function<void()>& task) {
    if (!frozen_) return false;
    std::lock_guard lock(mutex_);
    kept_.push_back(std::move(task));
    return true;
  }
  std::shared_ptr<Executor> inner_;
  std::atomic<bool> frozen_{false};
  std::mutex mutex_;
  std::vector<std::function<void()>> kept_;
};

class Witness : public Actor {
 public:
  explicit Witness(std::shared_ptr<std::atomic<bool>> destroyed) : destroyed_(destroyed) {
    handle<Note>([](const Note&) {});
  }
  ~Witness() override { *destroyed_ = true; }

 private:
  std::shared_ptr<std::atomic<bool>> destroyed_;
};

// An actor may use its Proc until it is destroyed (the tensor engine's
// streams do), so it goes with its Proc even when a drain task queued in a
// stopped pool still holds its mailbox.
TEST(ProcTeardown, AnActorIsDestroyedWithItsProcThoughAQueuedDrainHoldsItsMailbox) {
  auto io = std::make_shared<transport::IoPool>();
  auto pool = std::make_shared<FreezableExecutor>(io);
  auto hub = transport::makeLocalHub(io, 1, {});
  auto hosts = std::make_shared<const std::vector<std::string>>(1, "sim");
  auto proc =
      std::make_unique<Proc>(Proc::Options{0, 1, hosts, pool, /*stopsPool=*/false},
                             transport::makeLocalTransport(hub, 0), std::vector<std::string>(1));
  auto destroyed = std::make_shared<std::atomic<bool>>(false);
  ActorRef<> witness(proc->spawnLocal(std::make_unique<Witness>(destroyed), "witness"));
  pool->freeze();
  witness.send(Note{0, 1});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (pool->kept() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  ASSERT_GT(pool->kept(), 0u) << "the message's drain never reached the pool";
  proc->stop(0ms);
  io->stop();
  proc.reset();
  EXPECT_TRUE(*destroyed) << "the actor outlived its Proc";
}

}  // namespace
}  // namespace crown
