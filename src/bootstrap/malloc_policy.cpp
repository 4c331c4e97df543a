#include "crown/bootstrap/malloc_policy.h"

#include <dlfcn.h>
#include <malloc.h>

#include <climits>
#include <mutex>
#include <thread>

#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown {
namespace {

// Blocks above this are still mapped on their own: a tensor of gigabytes
// is rare, and kept in the heap it would pin its size between uses.
constexpr int kHeapBlockLimit = 1 << 30;

// Whether this process's malloc is glibc's own: no other allocator's entry
// points are loaded (tcmalloc, jemalloc, mimalloc, preloaded or linked).
// (Comparing malloc's address with libc's cannot tell: in a non-PIE
// executable such as Debian's python3, malloc resolves to its PLT stub.)
bool glibcMalloc() {
  for (const char* other : {"tc_malloc", "mallocx", "je_malloc", "mi_malloc"}) {
    if (::dlsym(RTLD_DEFAULT, other) != nullptr) return false;
  }
  return true;
}

// glibc's own settings of malloc, which the user's choice overrides ours.
std::string userMallocSetting() {
  for (const char* name : {"MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                           "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (env::get(name)) return name;
  }
  auto tunables = env::get("GLIBC_TUNABLES");
  if (tunables && tunables->find("glibc.malloc.") != std::string::npos) return "GLIBC_TUNABLES";
  return {};
}

// Returns free memory once it has stayed over the bound for two periods
// and changed since the last trim (so an idle process is trimmed once).
// Detached, touching no static object: it may outlive main.
void startTrimmer(std::size_t keepBytes, std::chrono::milliseconds period) {
  std::thread([keepBytes, period] {
    bool overBefore = false;
    std::size_t freeAtLastTrim = 0;
    for (;;) {
      std::this_thread::sleep_for(period);
      struct mallinfo2 info = ::mallinfo2();
      bool over = info.fordblks > keepBytes && info.fordblks != freeAtLastTrim;
      if (over && overBefore) {
        ::malloc_trim(0);
        freeAtLastTrim = ::mallinfo2().fordblks;
        over = false;
      }
      overBefore = over;
    }
  }).detach();
}

}  // namespace

MallocPlan planMalloc() {
  MallocPlan plan;
  std::string choice = env::choice("CROWN_MALLOC", "system", {"system", "keep"});
  plan.keepBytes =
      static_cast<std::size_t>(env::integer("CROWN_MALLOC_KEEP_MB", 1024, 0, 1 << 24)) << 20;
  plan.trimPeriod = env::millis("CROWN_MALLOC_TRIM_MS", std::chrono::milliseconds(2000),
                                std::chrono::milliseconds(10));
  if (choice == "system") {
    plan.reason = "CROWN_MALLOC is system (the default)";
  } else if (!glibcMalloc()) {
    plan.reason = "another malloc than glibc's is in use (preloaded)";
  } else if (std::string set = userMallocSetting(); !set.empty()) {
    plan.reason = set + " sets glibc's malloc";
  } else {
    plan.keep = true;
  }
  return plan;
}

MallocPlan keepMallocMemory() {
  static std::once_flag once;
  static MallocPlan applied;
  std::call_once(once, [] {
    applied = planMalloc();
    if (!applied.keep) {
      log::get().debug("malloc left as it is: {}", applied.reason);
      return;
    }
    bool set = ::mallopt(M_ARENA_MAX, 1) == 1 && ::mallopt(M_MMAP_THRESHOLD, kHeapBlockLimit) == 1 &&
               ::mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
    if (!set) {
      applied.keep = false;
      applied.reason = "glibc refused mallopt";
      log::get().warn("malloc left as it is: glibc refused mallopt; large tensors will cost "
                      "page faults at every use");
      return;
    }
    startTrimmer(applied.keepBytes, applied.trimPeriod);
    log::get().debug("malloc keeps freed memory (one arena); free memory above {} MiB is "
                     "returned after {} ms idle",
                     applied.keepBytes >> 20, 2 * applied.trimPeriod.count());
  });
  return applied;
}

}  // namespace crown
