// Casting on simulated procs (SIM-1): spawn by cast, every adverb, reductions,
// ORD-1 across casts and direct sends, and DLV-1 when members fail or hops
// drop out. The same agents and routing code run on real ranks (tests/mpi).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "crown/actor/lost_messages.h"
#include "crown/mesh/cast_tree.h"
#include "crown/mesh/point.h"
#include "crown/mesh/sim.h"

namespace crown {
namespace {

using namespace std::chrono_literals;
using mesh::Range;
using mesh::SimulatedWorld;
using Coords = std::map<std::string, std::size_t>;

struct WhereAreYou {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct AddRank {
  int value = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& value;
  }
};
struct FailOn {
  std::size_t rank = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& rank;
  }
};
/// ORD-1 probes: a note from some sender, and the notes received so far.
struct Note {
  int sender = 0;
  int n = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& sender& n;
  }
};
struct Notes {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Doze {
  int ms = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& ms;
  }
};

class Worker : public Actor {
 public:
  explicit Worker(int base = 0) : base_(base), bornAt_(mesh::here().coordinates()) {
    handle<WhereAreYou>([this](const WhereAreYou&) {
      EXPECT_EQ(mesh::here().coordinates(), bornAt_);  // the same point, seen from a handler
      return bornAt_;
    });
    handle<AddRank>([this](const AddRank& add) { return add.value + base_ + int(rank()); });
    handle<FailOn>([this](const FailOn& fail) {
      if (rank() == fail.rank) throw std::invalid_argument("rank " + std::to_string(rank()) + " refuses");
      return int(rank());
    });
    handle<Note>([this](const Note& note) { notes_.emplace_back(note.sender, note.n); });
    handle<Notes>([this](const Notes&) { return notes_; });
    handle<Doze>([this](const Doze& doze) {
      std::this_thread::sleep_for(std::chrono::milliseconds(doze.ms));
      return int(rank());
    });
  }

 private:
  int base_;
  Coords bornAt_;
  std::vector<std::pair<int, int>> notes_;
};

class Picky : public Actor {
 public:
  Picky() {
    if (mesh::here().rank % 3 == 1) throw std::runtime_error("not on this rank");
  }
};

TEST(Cast, SpawnGivesEveryActorItsCoordinates) {
  SimulatedWorld sim(12, {{"hosts", 3}, {"procs", 4}});
  auto workers = sim.world().spawn<Worker>("worker", 100);
  EXPECT_EQ(workers.size(), 12u);
  auto points = workers.call<Coords>(WhereAreYou{}).get(10s);
  for (std::size_t h = 0; h < 3; ++h) {
    for (std::size_t p = 0; p < 4; ++p) {
      Coords at{{"hosts", h}, {"procs", p}};
      EXPECT_EQ(points.get(at), at);
    }
  }
  auto sums = workers.call<int>(AddRank{1}).get(10s);
  EXPECT_EQ(sums.get({{"hosts", 2}, {"procs", 1}}), 1 + 100 + 9);
}

TEST(Cast, SlicesAddressTheirMembersOnly) {
  SimulatedWorld sim(24, {{"hosts", 4}, {"procs", 6}});
  auto workers = sim.world().spawn<Worker>("worker");
  auto slice = workers.slice({{"hosts", Range{1, 4, 2}}, {"procs", Range{1, 6, 2}}});
  ASSERT_EQ(slice.size(), 6u);
  auto replies = slice.call<int>(AddRank{0}).get(10s);
  auto values = replies.values();
  std::set<int> ranks(values.begin(), values.end());
  EXPECT_EQ(ranks, (std::set<int>{7, 9, 11, 19, 21, 23}));
  EXPECT_EQ(replies.get({{"hosts", 1}, {"procs", 2}}), 23);  // hosts index 1 of the slice = 3
  auto one = workers.at("hosts", 2).at("procs", 5);
  EXPECT_EQ(one.call_one<int>(AddRank{0}).get(10s), 17);
  EXPECT_EQ(workers.flatten("all").range("all", Range{20}).call<int>(AddRank{0}).get(10s).size(),
            4u);
}

// A mesh over chosen ranks (survivors): casts, spawns and replies reach
// exactly those ranks through a tree computed from positions, fan-out 2.
TEST(Cast, AMeshOfChosenRanksReachesExactlyThem) {
  SimulatedWorld sim(20);
  mesh::setCastFanout(sim.proc(0), 2);
  ProcMesh chosen(mesh::Shape({"ranks"}, mesh::Slice::ofRanks({0, 2, 3, 7, 8, 11, 13, 19})));
  auto workers = chosen.spawn<Worker>("chosen");
  auto replies = workers.call<int>(AddRank{0}).get(10s);
  ASSERT_EQ(replies.size(), 8u);
  EXPECT_EQ(replies.values(), (std::vector<int>{0, 2, 3, 7, 8, 11, 13, 19}));
  EXPECT_EQ(replies.get({{"ranks", 5}}), 11);
  auto some = workers.slice({{"ranks", Range{1, mesh::kEnd, 3}}});
  EXPECT_EQ(some.call<int>(AddRank{0}).get(10s).values(), (std::vector<int>{2, 8, 19}));
  EXPECT_EQ(workers.reduce<int>(AddRank{0}, mesh::Sum{}).get(10s), 63);
}

TEST(Cast, CallOneOnSeveralActorsFailsBeforeSending) {
  SimulatedWorld sim(4);
  auto workers = sim.world().spawn<Worker>("worker");
  try {
    workers.call_one<int>(Note{0, 0});
    FAIL() << "call_one on 4 actors did not throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exactly one actor"), std::string::npos) << e.what();
  }
  // Nothing was delivered: the first note anyone received is the next one.
  workers.broadcast(Note{0, 1});
  for (const auto& notes : workers.call<std::vector<std::pair<int, int>>>(Notes{}).get(10s).values())
    EXPECT_EQ(notes, (std::vector<std::pair<int, int>>{{0, 1}}));
}

TEST(Cast, ChooseSpreadsOverTheMembers) {
  SimulatedWorld sim(8);
  auto workers = sim.world().spawn<Worker>("worker");
  std::set<int> chosen;
  for (int i = 0; i < 16; ++i) chosen.insert(workers.choose<int>(AddRank{0}).get(10s));
  EXPECT_EQ(chosen.size(), 8u);
}

TEST(Cast, StreamYieldsEveryReplyOnce) {
  SimulatedWorld sim(40);
  auto workers = sim.world().spawn<Worker>("worker");
  auto stream = workers.stream<int>(AddRank{0});
  std::multiset<int> seen;
  while (auto item = stream.next(10s)) {
    EXPECT_EQ(item->get(), int(item->rank));
    EXPECT_EQ(item->point.at("procs"), item->rank);
    seen.insert(item->get());
  }
  EXPECT_EQ(seen.size(), 40u);
  EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 40u);
}

TEST(Cast, StreamShowsASlowMembersReplyLast) {
  SimulatedWorld sim(6);
  auto workers = sim.world().spawn<Worker>("worker");
  workers.at("procs", 3).broadcast(Doze{300});  // rank 3 is busy for a while (ORD-1: first)
  auto stream = workers.stream<int>(AddRank{0});
  std::vector<int> order;
  while (auto item = stream.next(10s)) order.push_back(item->get());
  ASSERT_EQ(order.size(), 6u);
  EXPECT_EQ(order.back(), 3);
}

TEST(Cast, ReductionsCombineUpTheTree) {
  SimulatedWorld sim(100);
  auto workers = sim.world().spawn<Worker>("worker");
  EXPECT_EQ(workers.reduce<int>(AddRank{1}, mesh::Sum{}).get(10s), 100 + 99 * 100 / 2);
  EXPECT_EQ(workers.reduce<int>(AddRank{5}, mesh::Min{}).get(10s), 5);
  EXPECT_EQ(workers.reduce<int>(AddRank{5}, mesh::Max{}).get(10s), 104);
  auto sumOfSquares = [](int a, int b) { return a + b; };
  auto evens = workers.slice({{"procs", Range{0, mesh::kEnd, 2}}});
  EXPECT_EQ(evens.reduce<int>(AddRank{0}, sumOfSquares).get(10s), 49 * 50);
}

TEST(Cast, AFailingMemberGetsAnErrorAndTheCallCompletes) {
  SimulatedWorld sim(20);
  auto workers = sim.world().spawn<Worker>("worker");
  auto replies = workers.call<int>(FailOn{7}).get(10s);
  for (std::size_t i = 0; i < 20; ++i) {
    if (i == 7) {
      EXPECT_THROW(replies.at(i), RemoteError);
    } else {
      EXPECT_EQ(replies.at(i), int(i));
    }
  }
  ASSERT_EQ(replies.failures().size(), 1u);
  EXPECT_EQ(replies.failures()[0].rank, 7u);
  EXPECT_NE(replies.failures()[0].what.find("rank 7 refuses"), std::string::npos);
  EXPECT_THROW(replies.values(), MeshError);
  try {
    workers.reduce<int>(FailOn{3}, mesh::Sum{}).get(10s);
    FAIL() << "a reduce with a failed member succeeded";
  } catch (const MeshError& e) {
    ASSERT_EQ(e.failures().size(), 1u);
    EXPECT_EQ(e.failures()[0].rank, 3u);
  }
}

TEST(Cast, SpawnFailureNamesEveryRankAndWhy) {
  SimulatedWorld sim(9);
  try {
    sim.world().spawn<Picky>("picky");
    FAIL() << "spawn did not throw";
  } catch (const MeshError& e) {
    std::set<std::size_t> failed;
    for (const auto& failure : e.failures()) failed.insert(failure.rank);
    EXPECT_EQ(failed, (std::set<std::size_t>{1, 4, 7}));
    EXPECT_NE(std::string(e.what()).find("not on this rank"), std::string::npos) << e.what();
  }
}

// ORD-1: every actor sees each sender's messages in send order, with casts
// to overlapping slices (through different trees) interleaved with direct
// sends to single members.
TEST(Cast, OrderHoldsAcrossCastsAndDirectSends) {
  setenv("CROWN_CAST_FANOUT", "2", 1);  // deep trees: more hops to overtake
  SimulatedWorld sim(30, {{"a", 5}, {"b", 6}});
  auto workers = sim.world().spawn<Worker>("worker");
  std::vector<decltype(workers)> targets{workers, workers.slice({{"a", Range{1, 4}}}),
                                         workers.slice({{"b", Range{0, 6, 2}}}),
                                         workers.at("a", 2)};
  constexpr int kRounds = 300;
  int n = 0;
  for (int round = 0; round < kRounds; ++round) {
    targets[round % targets.size()].broadcast(Note{0, n++});
    workers.ref({{"a", std::size_t(round % 5)}, {"b", std::size_t(round % 6)}}).send(Note{0, n++});
    if (round % 7 == 0) (void)workers.slice({{"b", 3}}).call<void>(Note{0, n++});
  }
  for (const auto& notes :
       workers.call<std::vector<std::pair<int, int>>>(Notes{}).get(30s).values()) {
    ASSERT_FALSE(notes.empty());
    for (std::size_t i = 1; i < notes.size(); ++i)
      ASSERT_LT(notes[i - 1].second, notes[i].second) << "out of order at note " << i;
  }
  unsetenv("CROWN_CAST_FANOUT");
}

// DLV-1: a hop that drops out in the middle of a cast fails its whole
// subtree with ProcessLost (their answers went to it); everyone else
// answers; nothing waits.
TEST(Cast, AHopLostMidCastFailsItsSubtreeAndTheCastCompletes) {
  SimulatedWorld sim(64);
  auto workers = sim.world().spawn<Worker>("worker");
  mesh::CastTree tree(workers.shape().slice(), mesh::castFanout());
  std::size_t hop = tree.rootChildren()[2];
  auto lost = tree.subtree(hop);
  ASSERT_GT(lost.size(), 1u);
  auto inFlight = workers.call<int>(Doze{300});
  std::this_thread::sleep_for(100ms);
  sim.disconnect(static_cast<Rank>(hop));
  auto replies = inFlight.get(10s);
  std::set<std::size_t> failed;
  for (const auto& failure : replies.failures()) {
    failed.insert(failure.rank);
    EXPECT_THROW(std::rethrow_exception(failure.error), ProcessLost);
  }
  EXPECT_EQ(failed, std::set<std::size_t>(lost.begin(), lost.end()));
  for (std::size_t i = 0; i < 64; ++i)
    if (!failed.count(i)) EXPECT_EQ(replies.at(i), int(i));
}

// DLV-1 in stream mode, where the sender's rank is also a hop (k = 2: rank
// 0's member forwards to 2, and 2 to 6 and 7). Rank 2 relays its own entry
// and dies while 6 and 7 are busy: 2's entry stands, 6 and 7 fail, and each
// member has exactly one entry. The relayed entry once went to the root on
// rank 0 instead of to rank 0's hop, which then failed rank 2 a second time.
TEST(Cast, AStreamHopOnTheSendersRankCountsWhatItsLostChildRelayed) {
  setenv("CROWN_CAST_FANOUT", "2", 1);
  SimulatedWorld sim(8);
  unsetenv("CROWN_CAST_FANOUT");
  auto workers = sim.world().spawn<Worker>("worker");
  mesh::CastTree tree(workers.shape().slice(), 2);
  ASSERT_EQ(tree.children(0), (std::vector<std::size_t>{2, 3}));
  ASSERT_EQ(tree.children(2), (std::vector<std::size_t>{6, 7}));
  for (int rank : {6, 7}) workers.at("procs", rank).broadcast(Doze{400});  // ORD-1: first
  auto stream = workers.stream<int>(AddRank{0});
  std::map<std::size_t, int> entries;  // rank -> how many
  std::set<std::size_t> failed;
  auto take = [&](const auto& item) {
    ++entries[item.rank];
    if (item.error) {
      failed.insert(item.rank);
      EXPECT_THROW(std::rethrow_exception(item.error), ProcessLost);
    } else {
      EXPECT_EQ(item.get(), int(item.rank));
    }
  };
  while (!entries.count(2)) {
    auto item = stream.next(10s);
    ASSERT_TRUE(item) << "the stream ended before rank 2 answered";
    take(*item);
  }
  sim.disconnect(2);
  while (auto item = stream.next(10s)) take(*item);
  EXPECT_EQ(entries.size(), 8u);
  for (const auto& [rank, count] : entries) EXPECT_EQ(count, 1) << "rank " << rank;
  EXPECT_EQ(failed, (std::set<std::size_t>{6, 7}));
}

// ORD-1 with DLV-1: a message whose predecessor never comes (its cast hop
// died first) is delivered once the order gap timeout passes.
TEST(Cast, AnOrderGapIsGivenUpAfterTheTimeout) {
  setenv("CROWN_ORDER_GAP_TIMEOUT_MS", "200", 1);
  SimulatedWorld sim(2);
  unsetenv("CROWN_ORDER_GAP_TIMEOUT_MS");
  auto workers = sim.world().spawn<Worker>("worker");
  auto second = workers.at("procs", 1);
  wire::Envelope secondNote{wire::MessageKind::kOneWay, ActorId{0, 999}, {1, workers.localId()},
                            0, wire::messageName<Note>(), /*seq=*/2};
  sim.proc(1).deliverLocal(secondNote, wire::toBytes(Note{9, 2}), nullptr);
  using Log = std::vector<std::pair<int, int>>;
  EXPECT_TRUE(second.call_one<Log>(Notes{}).get(10s).empty()) << "delivered ahead of number 1";
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(second.call_one<Log>(Notes{}).get(10s), (Log{{9, 2}}));
}

// Once a hop is known to be lost, later casts route around it: only the
// dead rank's own entry fails.
TEST(Cast, LaterCastsRouteAroundALostHop) {
  setenv("CROWN_CAST_FANOUT", "4", 1);  // three levels below the root
  SimulatedWorld sim(64);
  auto workers = sim.world().spawn<Worker>("worker");
  mesh::CastTree tree(workers.shape().slice(), mesh::castFanout());
  std::size_t hop = tree.rootChildren()[1];
  std::size_t grandchild = tree.children(tree.children(hop)[0])[0];
  sim.disconnect(static_cast<Rank>(hop));
  (void)workers.call<int>(AddRank{0}).get(10s);  // learns of the loss
  auto replies = workers.call<int>(AddRank{0}).get(10s);
  ASSERT_EQ(replies.failures().size(), 1u);
  EXPECT_EQ(replies.failures()[0].rank, hop);
  EXPECT_EQ(replies.at(grandchild), int(grandchild));
  EXPECT_THROW(workers.reduce<int>(AddRank{0}, mesh::Sum{}).get(10s), MeshError);
  auto stream = workers.stream<int>(AddRank{0});
  std::size_t items = 0, errors = 0;
  while (auto item = stream.next(10s)) {
    ++items;
    errors += item->error != nullptr;
  }
  EXPECT_EQ(items, 64u);
  EXPECT_EQ(errors, 1u);
  unsetenv("CROWN_CAST_FANOUT");
}

// Issue 10 part 3 (ORD-1, DLV-1): a hop dies unnoticed in the middle of a
// stream of broadcasts mixed with direct sends (k = 2), and its peers learn
// of it 40 broadcasts later. Its parent resends what it had sent to it
// around it, so every live member gets every broadcast exactly once and in
// order, and at once: far inside the 10 s gap timeout that each missing
// run waited before. The hop had forwarded most of the resent broadcasts
// already: those reach its subtree twice and are dropped as duplicates.
void killAHopMidStream(std::size_t hopDepth) {
  setenv("CROWN_CAST_FANOUT", "2", 1);
  setenv("CROWN_ORDER_GAP_TIMEOUT_MS", "10000", 1);
  SimulatedWorld sim(15);
  unsetenv("CROWN_CAST_FANOUT");
  unsetenv("CROWN_ORDER_GAP_TIMEOUT_MS");
  auto workers = sim.world().spawn<Worker>("worker");
  mesh::CastTree tree(workers.shape().slice(), 2);
  std::size_t hop = 0;
  for (std::size_t rank = 1; rank < 15; ++rank)
    if (tree.depth(rank) == hopDepth && tree.children(rank).size() == 2) hop = rank;
  ASSERT_NE(hop, 0u);
  std::vector<std::size_t> below = tree.subtree(hop);
  below.erase(std::find(below.begin(), below.end(), hop));
  ASSERT_GE(below.size(), 2u);
  std::optional<std::size_t> parent;  // none: the sender itself
  for (std::size_t rank = 0; rank < 15; ++rank) {
    auto children = tree.children(rank);
    if (std::find(children.begin(), children.end(), hop) != children.end()) parent = rank;
  }

  using Log = std::vector<std::pair<int, int>>;
  std::map<std::size_t, std::vector<int>> expected;  // rank -> the note numbers it must get
  int n = 0;
  std::chrono::steady_clock::time_point noticed;
  for (int i = 0; i < 200; ++i) {
    if (i == 80) sim.silence(static_cast<Rank>(hop));
    if (i == 120) {
      // Once the parent has forwarded them (ORD-1: its actor has had them),
      // the 40 broadcasts since the silence are lost with the hop.
      if (parent) (void)workers.at("procs", *parent).call_one<Log>(Notes{}).get(5s);
      sim.disconnect(static_cast<Rank>(hop));
      noticed = std::chrono::steady_clock::now();
    }
    workers.broadcast(Note{0, n});
    for (std::size_t rank = 0; rank < 15; ++rank) expected[rank].push_back(n);
    ++n;
    if (i % 3 == 0) {
      std::size_t rank = below[i % below.size()];
      workers.ref({{"procs", rank}}).send(Note{0, n});
      expected[rank].push_back(n++);
    }
  }
  auto logs = workers.call<Log>(Notes{}).get(5s);
  EXPECT_LT(std::chrono::steady_clock::now() - noticed, 2s) << "gaps waited for their timeout";
  for (std::size_t rank = 0; rank < 15; ++rank) {
    if (rank == hop) continue;
    std::vector<int> got;
    for (const auto& note : logs.at(rank)) got.push_back(note.second);
    EXPECT_EQ(got, expected[rank]) << "rank " << rank << " (hop " << hop << ")";
  }
}

TEST(Cast, BroadcastsLostWithAHopNextToTheSenderAreResentAtOnce) { killAHopMidStream(1); }

TEST(Cast, BroadcastsLostWithADeeperHopAreResentAtOnce) { killAHopMidStream(2); }

// What the resend window cannot cover is given up after the gap timeout,
// and each member that gave it up reports the count to the sender's rank,
// whose Proc hands it to its hook.
TEST(Cast, BroadcastsBeyondTheResendWindowAreReportedWithTheirCount) {
  setenv("CROWN_CAST_FANOUT", "2", 1);
  setenv("CROWN_CAST_RESEND_WINDOW", "4", 1);
  setenv("CROWN_ORDER_GAP_TIMEOUT_MS", "300", 1);
  SimulatedWorld sim(15);
  unsetenv("CROWN_CAST_FANOUT");
  unsetenv("CROWN_CAST_RESEND_WINDOW");
  unsetenv("CROWN_ORDER_GAP_TIMEOUT_MS");
  std::mutex mutex;
  std::vector<LostMessages> reports;
  sim.proc(0).setLostMessagesHook([&](const LostMessages& lost) {
    std::lock_guard lock(mutex);
    reports.push_back(lost);
  });
  auto workers = sim.world().spawn<Worker>("worker");
  mesh::CastTree tree(workers.shape().slice(), 2);
  std::size_t hop = tree.rootChildren()[0] != 0 ? tree.rootChildren()[0] : tree.rootChildren()[1];
  std::vector<std::size_t> below = tree.subtree(hop);
  below.erase(std::find(below.begin(), below.end(), hop));
  ASSERT_GE(below.size(), 2u);

  using Log = std::vector<std::pair<int, int>>;
  for (int i = 0; i < 2; ++i) workers.broadcast(Note{0, i});
  (void)workers.call<Log>(Notes{}).get(5s);  // after the two, everywhere (ORD-1)
  sim.silence(static_cast<Rank>(hop));
  for (int i = 2; i < 12; ++i) workers.broadcast(Note{0, i});  // 10 lost, the last 4 kept
  sim.disconnect(static_cast<Rank>(hop));

  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard lock(mutex);
      if (reports.size() >= below.size()) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(100ms);  // no report more than one per member
  std::lock_guard lock(mutex);
  std::set<std::size_t> reporters;
  for (const LostMessages& lost : reports) {
    reporters.insert(lost.dest.rank);
    EXPECT_EQ(lost.sender, (ActorId{0, 0}));
    EXPECT_EQ(lost.dest.local, workers.localId());
    EXPECT_EQ(lost.count, 6u);
    EXPECT_EQ(lost.last - lost.first + 1, 6u) << "one run: notes 2 to 7";
  }
  EXPECT_EQ(reports.size(), below.size());
  EXPECT_EQ(reporters, std::set<std::size_t>(below.begin(), below.end()));

  auto logs = workers.call<Log>(Notes{}).get(5s);
  for (std::size_t rank : below) {
    EXPECT_EQ(logs.at(rank), (Log{{0, 0}, {0, 1}, {0, 8}, {0, 9}, {0, 10}, {0, 11}}));
  }
}

TEST(Cast, ALostMemberMidCallGetsProcessLost) {
  SimulatedWorld sim(16);
  auto workers = sim.world().spawn<Worker>("worker");
  auto inFlight = workers.call<int>(Doze{400});
  std::this_thread::sleep_for(100ms);
  sim.disconnect(5);
  auto replies = inFlight.get(10s);
  EXPECT_THROW(replies.at(5), ProcessLost);
  EXPECT_EQ(replies.failures().size(), 1u);
}

// The sender's k can be set between casts; the cast carries it to the hops.
TEST(Cast, TheSendersFanoutCanBeSetBetweenCasts) {
  SimulatedWorld sim(64);
  auto workers = sim.world().spawn<Worker>("worker");
  Proc& controller = Proc::current();
  mesh::setCastFanout(controller, 2);
  EXPECT_EQ(mesh::castFanout(controller), 2u);
  EXPECT_EQ(workers.reduce<int>(AddRank{0}, mesh::Sum{}).get(10s), 63 * 64 / 2);
  mesh::setCastFanout(controller, 16);
  EXPECT_EQ(workers.call<int>(AddRank{0}).get(10s).at(40), 40);
  EXPECT_THROW(mesh::setCastFanout(controller, 0), ConfigError);
}

// SIM-1 at scale: a cast and collect through a tree of 4,096 virtual procs.
TEST(Cast, FourThousandVirtualProcs) {
  SimulatedWorld sim(4096, {{"hosts", 256}, {"procs", 16}});
  auto workers = sim.world().spawn<Worker>("worker");
  auto replies = workers.call<int>(AddRank{0}).get(60s);
  ASSERT_EQ(replies.size(), 4096u);
  EXPECT_TRUE(replies.failures().empty());
  for (std::size_t i = 0; i < 4096; i += 97) EXPECT_EQ(replies.at(i), int(i));
  EXPECT_EQ(workers.reduce<int>(AddRank{0}, mesh::Sum{}).get(60s), 4095 * 4096 / 2);
}

}  // namespace
}  // namespace crown
