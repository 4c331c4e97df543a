// Ports (crown/actor/port.h) on simulated procs (SIM-1): ORD-1 and FLO-1 of
// a stream port, and DLV-1 without probing (a watched rank lost, the owner
// stopped or dead, a holder that drops its port or dies holding it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <map>
#include <thread>

#include "crown/actor/spawn.h"
#include "crown/transport/local.h"

namespace crown {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Pour {
  PortRef port;
  int count = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& port& count;
  }
};
struct Answer {
  PortRef port;
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& port& value;
  }
};
struct Ignore {  // holds the port for the handler's length, never sends
  PortRef port;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& port;
  }
};
struct Keep {  // holds the port until the actor goes
  PortRef port;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& port;
  }
};
struct Open {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Forward {  // holds the port, hands it on to `to` to keep, keeps holding it
  PortRef port;
  ActorId to;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& port& to;
  }
};

// The receiver an Owner opened, for the test's thread to wait on.
std::shared_ptr<PortReceiver> g_opened;

class Holder : public Actor {
 public:
  Holder() {
    handle<Pour>([](const Pour& pour) {
      PortHandle port = Proc::current().holdPort(pour.port);
      for (int i = 0; i < pour.count; ++i) port.send(i);
    });
    handle<Answer>([](const Answer& answer) {
      Proc::current().holdPort(answer.port).send(answer.value);
    });
    handle<Ignore>([](const Ignore& ignore) { Proc::current().holdPort(ignore.port); });
    handle<Keep>([this](const Keep& keep) { kept_ = Proc::current().holdPort(keep.port); });
    handle<Forward>([this](const Forward& forward) {
      kept_ = Proc::current().holdPort(forward.port);
      Proc::current().request<void>(forward.to, Keep{kept_.ref()}).get(std::chrono::seconds(5));
    });
    handle<Open>([](const Open&) {
      g_opened = std::make_shared<PortReceiver>(Proc::current().openPort(PortMode::kStream));
      return g_opened->ref();
    });
  }

 private:
  PortHandle kept_;
};

int valueOf(const PortItem& item) {
  if (item.error) std::rethrow_exception(item.error);
  return wire::fromBytes<int>(item.payload);
}

template <class E>
bool errorIs(const PortItem& item) {
  try {
    std::rethrow_exception(item.error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

class PortTest : public ::testing::Test {
 protected:
  void boot(Rank size) {
    pool_ = std::make_shared<transport::IoPool>();
    hub_ = transport::makeLocalHub(pool_, size);
    auto hosts = std::make_shared<const std::vector<std::string>>(size, "sim");
    std::vector<std::string> peers(size);
    for (Rank r = 0; r < size; ++r) {
      Proc::Options options{r, size, hosts, pool_, /*stopsPool=*/false};
      procs_.push_back(
          std::make_unique<Proc>(options, transport::makeLocalTransport(hub_, r), peers));
    }
    for (Rank r = 0; r < size; ++r) holders_.push_back(spawnOn<Holder>(r, "holder").get(10s));
  }

  void TearDown() override {
    g_opened.reset();
    for (auto& proc : procs_) proc->stop(0ms);
    if (pool_) pool_->stop();
    procs_.clear();
    ::unsetenv("CROWN_MAILBOX_LIMIT_MESSAGES");
  }

  Proc& controller() { return *procs_[0]; }

  std::shared_ptr<transport::IoPool> pool_;
  std::shared_ptr<transport::LocalHub> hub_;
  std::vector<std::unique_ptr<Proc>> procs_;
  std::vector<ActorRef<Holder>> holders_;
};

// ORD-1: values from one sender to one port arrive in send order.
TEST_F(PortTest, AHundredThousandValuesThroughOneStreamPortArriveInOrder) {
  boot(3);
  constexpr int kCount = 100000;
  PortReceiver port = controller().openPort(PortMode::kStream);
  auto poured = holders_[1].call<void>(Pour{port.ref(), kCount});
  for (int i = 0; i < kCount; ++i) {
    auto item = port.next(10s);
    ASSERT_TRUE(item.has_value());
    ASSERT_EQ(item->from, 1u);
    ASSERT_EQ(valueOf(*item), i);
  }
  poured.get(10s);
  EXPECT_THROW(port.next(50ms), Timeout);  // nothing more, and still open
  EXPECT_EQ(controller().openPorts(), 1u);
  port.close();
  EXPECT_EQ(controller().openPorts(), 0u);
  EXPECT_FALSE(port.next(0ms).has_value());  // closed and drained
}

// FLO-1: a stream port's queue never grows past the window; the sender
// waits, and goes on as the receiver takes values.
TEST_F(PortTest, AStreamPortsSenderWaitsForItsReceiver) {
  ::setenv("CROWN_MAILBOX_LIMIT_MESSAGES", "64", 1);
  boot(2);
  constexpr int kCount = 2000;
  PortReceiver port = controller().openPort(PortMode::kStream);
  auto poured = holders_[1].call<void>(Pour{port.ref(), kCount});
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(port.queued(), 64u);
  EXPECT_FALSE(poured.isReady());  // waiting for room
  for (int i = 0; i < kCount; ++i) {
    ASSERT_LE(port.queued(), 64u);
    auto item = port.next(10s);
    ASSERT_TRUE(item.has_value());
    ASSERT_EQ(valueOf(*item), i);
  }
  poured.get(10s);
}

// A port's owner pours into it itself: it never waits for room (it would
// wait on its own next()).
TEST_F(PortTest, TheOwnerSendsToItsOwnStreamPortWithoutWaiting) {
  ::setenv("CROWN_MAILBOX_LIMIT_MESSAGES", "16", 1);
  boot(1);
  PortReceiver port = controller().openPort(PortMode::kStream);
  PortHandle self = controller().holdPort(port.ref());
  for (int i = 0; i < 100; ++i) self.send(i);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(valueOf(*port.next(1s)), i);
}

// DLV-1: a watched rank lost is an error item at once, with no probe.
TEST_F(PortTest, AWatchedRankLostFailsThePortPromptly) {
  boot(4);
  PortReceiver stream = controller().openPort(PortMode::kStream, {2});
  PortReceiver once = controller().openPort(PortMode::kOnce, {2});
  PortReceiver members = controller().openPort(PortMode::kPerMember, {1, 2, 3});
  holders_[1].call<void>(Answer{members.ref(), 10}).get(5s);
  auto waiter = std::async(std::launch::async, [&] {
    auto start = Clock::now();
    auto item = stream.next(5s);
    return std::make_pair(std::move(item), Clock::now() - start);
  });
  std::this_thread::sleep_for(100ms);
  auto cut = Clock::now();
  transport::disconnect(*hub_, 2);
  auto [item, waited] = waiter.get();
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->from, 2u);
  EXPECT_TRUE(errorIs<ProcessLost>(*item));
  EXPECT_LT(Clock::now() - cut, 500ms);

  auto failed = once.next(1s);
  ASSERT_TRUE(failed.has_value());
  EXPECT_TRUE(errorIs<ProcessLost>(*failed));
  EXPECT_FALSE(once.next(1s).has_value());  // a one-shot port ends with its item

  holders_[3].call<void>(Answer{members.ref(), 30}).get(5s);
  std::map<Rank, PortItem> byMember;
  while (auto next = members.next(1s)) byMember[next->from] = std::move(*next);
  ASSERT_EQ(byMember.size(), 3u);
  EXPECT_EQ(valueOf(byMember[1]), 10);
  EXPECT_TRUE(errorIs<ProcessLost>(byMember[2]));
  EXPECT_EQ(valueOf(byMember[3]), 30);

  // Opened after the loss: it hears at once.
  PortReceiver late = controller().openPort(PortMode::kOnce, {2});
  auto lost = late.next(100ms);
  ASSERT_TRUE(lost.has_value());
  EXPECT_TRUE(errorIs<ProcessLost>(*lost));
}

// DLV-1: a port whose owner stops fails its waiter, at once.
TEST_F(PortTest, APortFailsWhenItsOwnerStops) {
  boot(2);
  PortRef ref = holders_[1].call<PortRef>(Open{}).get(5s);
  EXPECT_EQ(ref.owner, holders_[1].id());
  auto opened = g_opened;
  auto waiter = std::async(std::launch::async, [opened] { return opened->next(5s); });
  std::this_thread::sleep_for(100ms);
  auto stopped = Clock::now();
  procs_[1]->stopLocal(holders_[1].id().local);
  EXPECT_THROW(waiter.get(), ActorStopped);
  EXPECT_LT(Clock::now() - stopped, 500ms);
  EXPECT_THROW(opened->next(0ms), ActorStopped);
  EXPECT_EQ(procs_[1]->openPorts(), 0u);
}

TEST_F(PortTest, APortFailsWhenItsOwnerDies) {
  boot(2);
  holders_[1].call<PortRef>(Open{}).get(5s);
  auto opened = g_opened;
  procs_[1]->failLocal(holders_[1].id().local,
                       ActorFailed(1, "sim", "holder", "it raised on purpose"));
  try {
    opened->next(1s);
    FAIL() << "next() returned";
  } catch (const ActorFailed& e) {
    EXPECT_EQ(e.cause(), "it raised on purpose");
  }
}

// A holder that drops a one-shot port without sending tells its owner at
// once (no probe interval): the waiter fails in well under a second.
TEST_F(PortTest, AHandleDroppedWithoutASendFailsTheOneShotPortAtOnce) {
  boot(2);
  PortReceiver port = controller().openPort(PortMode::kOnce, {1});
  auto start = Clock::now();
  holders_[1].call<void>(Ignore{port.ref()}).get(5s);
  auto item = port.next(1s);
  EXPECT_LT(Clock::now() - start, 500ms);
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->from, 1u);
  EXPECT_TRUE(item->dropped);
  EXPECT_THROW(std::rethrow_exception(item->error), Error);
  EXPECT_FALSE(port.next(1s).has_value());
  EXPECT_EQ(controller().openPorts(), 0u);
}

// Per member: one item each, the drop of one member among the values of others.
TEST_F(PortTest, APerMemberPortTakesOneItemFromEachMember) {
  boot(4);
  PortReceiver port = controller().openPort(PortMode::kPerMember, {1, 2, 3});
  holders_[1].call<void>(Answer{port.ref(), 1}).get(5s);
  holders_[1].call<void>(Answer{port.ref(), 99}).get(5s);  // a second answer: dropped
  holders_[2].call<void>(Ignore{port.ref()}).get(5s);
  holders_[3].call<void>(Answer{port.ref(), 3}).get(5s);
  std::map<Rank, PortItem> byMember;
  while (auto next = port.next(1s)) byMember[next->from] = std::move(*next);
  ASSERT_EQ(byMember.size(), 3u);
  EXPECT_EQ(valueOf(byMember[1]), 1);
  EXPECT_TRUE(byMember[2].dropped);
  EXPECT_EQ(valueOf(byMember[3]), 3);
}

// A holder that dies holding a port tells its owner, whatever the mode.
TEST_F(PortTest, AHolderThatStopsHoldingAPortTellsItsOwner) {
  boot(2);
  PortReceiver stream = controller().openPort(PortMode::kStream);
  holders_[1].call<void>(Keep{stream.ref()}).get(5s);
  EXPECT_THROW(stream.next(100ms), Timeout);  // kept: nothing yet
  procs_[1]->stopLocal(holders_[1].id().local);
  auto item = stream.next(1s);
  ASSERT_TRUE(item.has_value());
  EXPECT_TRUE(item->dropped);
  EXPECT_TRUE(errorIs<ActorStopped>(*item));
}

// A port whose holder on `holder` has sent nothing hears of that rank's
// loss at once, as the error item from it.
void expectHoldersLossHeard(PortReceiver& port, transport::LocalHub& hub, Rank holder) {
  EXPECT_THROW(port.next(100ms), Timeout);  // held: nothing yet
  auto cut = Clock::now();
  transport::disconnect(hub, holder);
  auto item = port.next(2s);
  EXPECT_LT(Clock::now() - cut, 500ms);
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->from, holder);
  EXPECT_TRUE(errorIs<ProcessLost>(*item));
}

// A port that watches no rank watches its holders' (kPortWatch): the loss
// of the rank that holds it fails its waiter at once, as a watched rank's.
TEST_F(PortTest, TheLossOfARankHoldingAnUnwatchedPortIsHeardAtOnce) {
  boot(3);
  PortReceiver stream = controller().openPort(PortMode::kStream);
  holders_[2].call<void>(Keep{stream.ref()}).get(5s);
  expectHoldersLossHeard(stream, *hub_, 2);
}

// A member that hands its reply port on to a third rank: that rank's loss
// is heard too, though the port watched only the member.
TEST_F(PortTest, APortHandedOnToAThirdRankHearsThatRanksLoss) {
  boot(4);
  PortReceiver members = controller().openPort(PortMode::kPerMember, {1});
  holders_[1].call<void>(Forward{members.ref(), holders_[3].id()}).get(5s);
  expectHoldersLossHeard(members, *hub_, 3);
}

// A holder that let go is not watched any more: its rank's loss is not the port's.
TEST_F(PortTest, ARankThatLetGoOfAPortIsNotWatched) {
  boot(3);
  PortReceiver stream = controller().openPort(PortMode::kStream);
  holders_[2].call<void>(Pour{stream.ref(), 2}).get(5s);  // held for the handler only
  EXPECT_EQ(valueOf(*stream.next(1s)), 0);
  EXPECT_EQ(valueOf(*stream.next(1s)), 1);
  holders_[1].call<void>(Pour{stream.ref(), 0}).get(5s);  // the link to rank 2 has carried the
  transport::disconnect(*hub_, 2);                        // let-go before this: FIFO per link
  EXPECT_THROW(stream.next(300ms), Timeout);
}

// Values to a closed port are dropped; shutdown fails the ports left open.
TEST_F(PortTest, AClosedPortDropsLaterValuesAndShutdownFailsOpenPorts) {
  boot(2);
  PortReceiver closed = controller().openPort(PortMode::kStream);
  PortRef ref = closed.ref();
  holders_[1].call<void>(Pour{ref, 2}).get(5s);
  closed.close();
  holders_[1].call<void>(Pour{ref, 10}).get(5s);
  EXPECT_EQ(valueOf(*closed.next(0ms)), 0);  // what came before the close stays
  EXPECT_EQ(valueOf(*closed.next(0ms)), 1);
  EXPECT_FALSE(closed.next(0ms).has_value());
  PortReceiver open = controller().openPort(PortMode::kStream);
  auto waiter = std::async(std::launch::async, [&] { return open.next(5s); });
  std::this_thread::sleep_for(50ms);
  controller().stop(0ms);
  EXPECT_THROW(waiter.get(), Error);
}

}  // namespace
}  // namespace crown
