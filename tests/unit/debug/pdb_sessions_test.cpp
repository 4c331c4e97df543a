// The two ends of remote pdb: the controller's registry lists a session at
// its prompt, hands out its output once, refuses a line to a session that
// is not at a prompt, and forgets one that ended or whose rank is lost; a
// rank's inbox hands each session its own lines and gives up when told.
#include <gtest/gtest.h>

#include <thread>

#include "crown/common/error.h"
#include "debug/pdb_sessions.h"

namespace crown::debug::detail {
namespace {

using namespace std::chrono_literals;

PdbPrompt prompt(Rank rank, std::uint64_t session, std::string output, bool ended = false) {
  PdbPrompt p;
  p.where.rank = rank;
  p.where.session = session;
  p.where.actor = "debugee";
  p.where.function = "step";
  p.where.line = 12;
  p.output = std::move(output);
  p.ended = ended;
  return p;
}

const PdbRegistry::Alive kAllAlive = [](Rank) { return true; };

TEST(PdbRegistry, ASessionAtItsPromptIsListedAndItsOutputReadOnce) {
  PdbRegistry registry;
  EXPECT_TRUE(registry.take(prompt(3, 1, "> step()\n(Pdb) ")));  // stopped: said once
  EXPECT_FALSE(registry.take(prompt(3, 1, "(Pdb) ")));
  auto listed = registry.list(kAllAlive);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].rank, 3);
  EXPECT_EQ(listed[0].actor, "debugee");
  EXPECT_TRUE(listed[0].waiting);
  PdbRead read = registry.read(3, 1, 0ms, kAllAlive);
  EXPECT_EQ(read.output, "> step()\n(Pdb) (Pdb) ");
  EXPECT_TRUE(read.waiting);
  EXPECT_FALSE(read.ended);
  EXPECT_EQ(registry.read(3, 1, 0ms, kAllAlive).output, "");
}

TEST(PdbRegistry, ALineGoesOnlyToASessionAtItsPrompt) {
  PdbRegistry registry;
  EXPECT_THROW(registry.leavePrompt(0, 1), Error);  // not known
  registry.take(prompt(0, 1, "(Pdb) "));
  registry.leavePrompt(0, 1);
  EXPECT_THROW(registry.leavePrompt(0, 1), Error);  // running the line it was sent
  auto start = std::chrono::steady_clock::now();
  PdbRead running = registry.read(0, 1, 300ms, kAllAlive);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_FALSE(running.waiting);
  EXPECT_FALSE(running.ended);
  std::thread rank([&] {
    std::this_thread::sleep_for(100ms);
    registry.take(prompt(0, 1, "2\n(Pdb) "));
  });
  PdbRead next = registry.read(0, 1, 5s, kAllAlive);  // woken by the prompt, not the bound
  rank.join();
  EXPECT_TRUE(next.waiting);
  EXPECT_EQ(next.output, "2\n(Pdb) ");
}

TEST(PdbRegistry, AnEndedSessionIsReadOnceThenForgotten) {
  PdbRegistry registry;
  registry.take(prompt(1, 7, "(Pdb) "));
  registry.leavePrompt(1, 7);
  EXPECT_FALSE(registry.take(prompt(1, 7, "done\n", true)));
  EXPECT_TRUE(registry.list(kAllAlive).empty());
  PdbRead read = registry.read(1, 7, 1s, kAllAlive);
  EXPECT_TRUE(read.ended);
  EXPECT_EQ(read.output, "(Pdb) done\n");  // never read at its prompt
  EXPECT_THROW(registry.read(1, 7, 0ms, kAllAlive), Error);
}

TEST(PdbRegistry, ASessionThatStopsAgainAtALaterBreakpointIsBack) {
  PdbRegistry registry;
  registry.take(prompt(1, 7, "(Pdb) "));
  registry.leavePrompt(1, 7);
  registry.take(prompt(1, 7, "", true));
  EXPECT_TRUE(registry.take(prompt(1, 7, "> later()\n(Pdb) ")));
  ASSERT_EQ(registry.list(kAllAlive).size(), 1u);
  PdbRead read = registry.read(1, 7, 0ms, kAllAlive);
  EXPECT_TRUE(read.waiting);
  EXPECT_FALSE(read.ended);
}

TEST(PdbRegistry, ALostRanksSessionsAreForgotten) {
  PdbRegistry registry;
  registry.take(prompt(2, 1, "(Pdb) "));
  registry.take(prompt(4, 1, "(Pdb) "));
  auto twoIsLost = [](Rank r) { return r != 2; };
  PdbRead read = registry.read(2, 1, 1s, twoIsLost);
  EXPECT_TRUE(read.ended);
  EXPECT_NE(read.output.find("rank 2 is lost"), std::string::npos);
  auto listed = registry.list(twoIsLost);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].rank, 4);
}

TEST(PdbInbox, EachSessionGetsItsOwnLinesInOrder) {
  PdbInbox inbox;
  inbox.put({1, "p x"});
  inbox.put({2, "n"});
  inbox.put({1, "c"});
  auto never = [] { return false; };
  EXPECT_EQ(inbox.take(1, never), "p x");
  EXPECT_EQ(inbox.take(2, never), "n");
  EXPECT_EQ(inbox.take(1, never), "c");
}

TEST(PdbInbox, ATakeGivesUpWhenToldOrStopped) {
  PdbInbox inbox;
  EXPECT_EQ(inbox.take(1, [] { return true; }), std::nullopt);
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    inbox.stop();
  });
  EXPECT_EQ(inbox.take(1, [] { return false; }), std::nullopt);
  stopper.join();
}

}  // namespace
}  // namespace crown::debug::detail
