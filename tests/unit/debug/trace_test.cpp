// Traces: the recording side (crown/common/trace.h) keeps nothing while off,
// keeps spans, instants and flows per thread while on, bounds what it keeps
// and counts the rest; the merged file (crown/debug/trace.h) is the Trace
// Event Format, each rank's clock moved onto rank 0's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "crown/common/trace.h"
#include "crown/debug/trace.h"

namespace crown::debug {
namespace {

// The tracer is process-wide: each test starts from an empty, enabled one
// and leaves it off.
class Tracing : public ::testing::Test {
 protected:
  void SetUp() override {
    trace::disable();
    trace::take();
  }
  void TearDown() override {
    trace::disable();
    trace::take();
  }
};

TEST_F(Tracing, OffRecordsNothing) {
  ASSERT_FALSE(trace::on());
  trace::Span span;
  if (trace::on()) span.begin("actor", "never");
  span.end();  // never began: nothing
  EXPECT_TRUE(trace::take().events.empty());
}

TEST_F(Tracing, OnKeepsSpansInstantsAndFlowsWithTheirThreads) {
  trace::enable(100);
  {
    trace::Span span;
    span.begin("actor", "counter incr", "from 0:5");
    trace::flowStart("cast", 42);
    trace::instant("send", "crown::CastMessage", "to rank 2");
  }
  std::thread([] { trace::instant("send", "elsewhere"); }).join();
  trace::Recorded got = trace::take();
  ASSERT_EQ(got.events.size(), 4u);
  // The flow and the instant were recorded inside the span, which is
  // recorded when it ends.
  EXPECT_EQ(got.events[0].phase, 's');
  EXPECT_EQ(got.events[0].id, 42u);
  EXPECT_EQ(got.events[1].phase, 'i');
  EXPECT_EQ(got.events[2].phase, 'X');
  EXPECT_EQ(got.events[2].name, "counter incr");
  EXPECT_EQ(got.events[2].detail, "from 0:5");
  EXPECT_LE(got.events[2].startNs, got.events[0].startNs);
  EXPECT_GE(got.events[2].durationNs, 0);
  EXPECT_NE(got.events[3].thread, got.events[0].thread);  // another thread, another track
  EXPECT_GE(got.threads.size(), 2u);
  EXPECT_TRUE(trace::take().events.empty());  // taken out
}

TEST_F(Tracing, RenameReachesTheInnermostOpenSpanOnly) {
  trace::enable(100);
  trace::Span::renameInnermost("no span open: nothing to rename");
  {
    trace::Span handler;
    handler.begin("actor", "workers crown::PyCall");
    {
      trace::Span inner;
      inner.begin("send", "inner");
      trace::Span::renameInnermost("inner renamed");
    }
    trace::Span::renameInnermost("workers square");  // the inner one ended: the handler's
  }
  trace::Span::renameInnermost("after both ended: nothing");
  trace::Recorded got = trace::take();
  ASSERT_EQ(got.events.size(), 2u);
  EXPECT_EQ(got.events[0].name, "inner renamed");
  EXPECT_EQ(got.events[1].name, "workers square");
}

TEST_F(Tracing, PastTheBoundEventsAreCountedNotKept) {
  trace::enable(3);
  for (int i = 0; i < 10; ++i) trace::instant("send", "x");
  trace::Recorded got = trace::take();
  EXPECT_EQ(got.events.size(), 3u);
  EXPECT_EQ(got.dropped, 7u);
  trace::instant("send", "after the take");  // the bound counts from the take
  EXPECT_EQ(trace::take().events.size(), 1u);
}

TEST(TraceIds, DistinctTriplesGetDistinctIdsThatJsonKeepsExact) {
  EXPECT_NE(trace::flowId(0, 1, 2), trace::flowId(0, 2, 1));
  EXPECT_NE(trace::flowId(1, 0, 2), trace::flowId(0, 1, 2));
  EXPECT_EQ(trace::flowId(3, 7, 9), trace::flowId(3, 7, 9));
  EXPECT_LT(trace::flowId(~0ull, ~0ull, ~0ull), 1ull << 53);
}

RankTrace rankTrace(Rank rank, std::vector<trace::Event> events) {
  RankTrace t;
  t.rank = rank;
  t.host = "node" + std::to_string(rank);
  t.events = std::move(events);
  t.threads = {{1, "worker"}};
  return t;
}

TEST(ChromeTrace, ClocksAreAlignedAndFlowsAndAsyncSpansWritten) {
  // Rank 1's clock runs 5 ms ahead of rank 0's: its hop at 5.1 ms on its own
  // clock is 0.1 ms after rank 0's send.
  std::vector<RankTrace> traces = {
      rankTrace(0, {{'X', "cast", "cast", 1'000'000, 50'000, 0, 1, ""},
                    {'s', "cast", "flow", 1'010'000, 0, 7, 1, ""}}),
      rankTrace(1, {{'X', "cast", "cast hop", 6'100'000, 20'000, 0, 1, "from rank 0"},
                    {'f', "cast", "flow", 6'100'000, 0, 7, 1, ""},
                    {'A', "rdma", "read_into", 6'200'000, 300'000, 99, 1, "64 bytes"}})};
  auto document = nlohmann::json::parse(chromeTrace(traces, {0, 5'000'000}));
  const auto& events = document["traceEvents"];
  auto find = [&](const std::string& ph, Rank pid) {
    for (const auto& e : events) {
      if (e["ph"] == ph && e["pid"] == pid) return e;
    }
    ADD_FAILURE() << "no event " << ph << " of rank " << pid;
    return nlohmann::json{};
  };
  EXPECT_DOUBLE_EQ(find("X", 0)["ts"].get<double>(), 0.0);  // from the earliest event
  EXPECT_DOUBLE_EQ(find("X", 0)["dur"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(find("s", 0)["ts"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(find("f", 1)["ts"].get<double>(), 100.0);
  EXPECT_EQ(find("f", 1)["bp"], "e");
  EXPECT_EQ(find("f", 1)["id"], find("s", 0)["id"]);
  EXPECT_EQ(find("X", 1)["args"]["detail"], "from rank 0");
  EXPECT_DOUBLE_EQ(find("b", 1)["ts"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(find("e", 1)["ts"].get<double>(), 500.0);
  int tracks = 0;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      ++tracks;
      EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()) + " (node" +
                                       std::to_string(e["pid"].get<int>()) + ")");
    }
  }
  EXPECT_EQ(tracks, 2);
  EXPECT_EQ(document["otherData"]["dropped_events"], 0);
}

TEST(ChromeTrace, ASilentRankHasItsTrackAndIsNamedInOtherData) {
  RankTrace silent = rankTrace(2, {});
  silent.error = "timed out";
  RankTrace full = rankTrace(0, {{'i', "send", "x", 10, 0, 0, 1, ""}});
  full.dropped = 5;
  auto document = nlohmann::json::parse(chromeTrace({full, silent}, {}));
  EXPECT_EQ(document["otherData"]["silent_ranks"][0]["rank"], 2);
  EXPECT_EQ(document["otherData"]["silent_ranks"][0]["error"], "timed out");
  EXPECT_EQ(document["otherData"]["dropped_events"], 5);
}

TEST(ChromeTrace, NothingRecordedIsStillAValidDocument) {
  auto document = nlohmann::json::parse(chromeTrace({}, {}));
  EXPECT_TRUE(document["traceEvents"].is_array());
  EXPECT_TRUE(document["traceEvents"].empty());
}

}  // namespace
}  // namespace crown::debug
