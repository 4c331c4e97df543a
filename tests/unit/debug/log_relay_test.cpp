// The controller's end of log forwarding: the same line of many ranks in a
// window is printed once with the ranks, a rank's repeated line is kept,
// and without a window each line is printed at once with its rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "crown/debug/logs.h"
#include "debug/log_relay.h"

namespace crown::debug {
namespace {

using namespace std::chrono_literals;

// Fd 1 in a file while alive; text() is what was written to it.
class CapturedStdout {
 public:
  CapturedStdout() : file_(std::tmpfile()), saved_(::dup(1)) {
    std::fflush(stdout);
    ::dup2(::fileno(file_), 1);
  }
  ~CapturedStdout() {
    restore();
    std::fclose(file_);
  }
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    for (int c; (c = std::fgetc(file_)) != EOF;) out += static_cast<char>(c);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, 1);
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_;
};

TEST(RankRanges, JoinRunsInOrder) {
  EXPECT_EQ(rankRanges({5, 0, 1, 2, 3, 9, 7, 8}), "0-3,5,7-9");
  EXPECT_EQ(rankRanges({4}), "4");
  EXPECT_EQ(rankRanges({2, 2, 1}), "1-2");
}

TEST(LogCollector, MergesTheSameLineOfManyRanksWithinAWindow) {
  CapturedStdout out;
  {
    detail::LogCollector collector;
    collector.setWindow(200ms);
    for (Rank r : {1, 2, 4, 3}) collector.add(LogLines{r, 1, {"step 100", "same"}});
    collector.add(LogLines{3, 1, {"odd"}});
    collector.add(LogLines{2, 1, {"same"}});  // rank 2's second "same": a line of its own
    std::this_thread::sleep_for(600ms);       // printed by the window's end, unasked
    collector.add(LogLines{5, 1, {"after"}});
  }  // the rest when the collector goes
  EXPECT_EQ(out.text(),
            "[ranks 1-4] step 100\n[ranks 1-4] same\n[rank 3] odd\n[rank 2] same\n"
            "[rank 5] after\n");
}

TEST(LogCollector, WithoutAWindowPrintsEachLineAtOnce) {
  CapturedStdout out;
  detail::LogCollector collector;
  collector.add(LogLines{7, 1, {"one", "two"}});
  EXPECT_EQ(out.text(), "[rank 7] one\n[rank 7] two\n");
}

}  // namespace
}  // namespace crown::debug
