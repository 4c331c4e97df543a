// crown's settings of glibc's malloc, on request (CROWN_MALLOC=keep,
// bootstrap/malloc_policy.h): freed memory stays for the next use, and
// returns to the system once a lot of it has stayed free while the process
// idles; the user's own malloc settings, or another malloc, are left alone. (Its own executable: the
// policy is process-wide.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "crown/bootstrap/malloc_policy.h"
#include "crown/common/error.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kMiB = 1 << 20;

std::size_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST(MallocPolicy, OnlyAskedForAndNotWhereTheUserSetMallocOrChoseAnother) {
  EXPECT_EQ(planMalloc().reason, "CROWN_MALLOC is system (the default)");
  ScopedEnv asked("CROWN_MALLOC", "keep");
  EXPECT_TRUE(planMalloc().keep) << planMalloc().reason;  // glibc's malloc, nothing set
  {
    ScopedEnv arenas("MALLOC_ARENA_MAX", "4");
    MallocPlan plan = planMalloc();
    EXPECT_FALSE(plan.keep);
    EXPECT_NE(plan.reason.find("MALLOC_ARENA_MAX"), std::string::npos) << plan.reason;
  }
  {
    ScopedEnv tunables("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0");
    EXPECT_FALSE(planMalloc().keep);
  }
  {
    ScopedEnv bad("CROWN_MALLOC", "tcmalloc");
    EXPECT_THROW(planMalloc(), ConfigError);
  }
}

TEST(MallocPolicy, FreedMemoryStaysAndReturnsOnceTheProcessIdles) {
  ScopedEnv asked("CROWN_MALLOC", "keep");
  ScopedEnv keep("CROWN_MALLOC_KEEP_MB", "32");
  ScopedEnv period("CROWN_MALLOC_TRIM_MS", "100");
  ASSERT_TRUE(keepMallocMemory().keep);
  std::size_t before = residentBytes();
  // 64 MiB blocks from a thread of its own, as an engine's results are.
  std::thread([] {
    for (int step = 0; step < 3; ++step) {
      std::vector<char*> blocks;
      for (int i = 0; i < 4; ++i) {
        blocks.push_back(static_cast<char*>(std::malloc(64 * kMiB)));
        std::memset(blocks.back(), 1, 64 * kMiB);
      }
      for (char* block : blocks) std::free(block);
    }
  }).join();
  // Freed, it stays: the next step finds it (no page to fault in).
  std::size_t kept = residentBytes();
  EXPECT_GT(kept, before + 200 * kMiB) << "freed memory went back at once";
  // Idle: within two periods (and a margin), most of it goes back.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (residentBytes() > before + 64 * kMiB && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_LE(residentBytes(), before + 64 * kMiB) << "kept " << (kept - before) / kMiB << " MiB";
}

}  // namespace
}  // namespace crown
