#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/job_ender.h"
#include "bootstrap/lifecycle.h"
#include "crown/bootstrap/controller.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

// Tells every live worker to exit with `code` and waits for their acks, so
// that none is still serving when rank 0 finalises. Returns the ranks that
// did not acknowledge (lost meanwhile, or silent past the bound).
std::vector<Rank> shutDownWorkers(Proc& proc, int code) {
  auto& lifecycle = detail::Lifecycle::of(proc);
  std::vector<Future<void>> acks;
  std::vector<Rank> asked;
  detail::Shutdown shutdown{code, lifecycle.ranksLost()};
  for (Rank r = 1; r < proc.size(); ++r) {
    if (proc.alive(r)) {
      acks.push_back(proc.request<void>({r, lifecycle.agentId()}, shutdown));
      asked.push_back(r);
    }
  }
  detail::awaitAcks(acks, env::millis("CROWN_FLUSH_TIMEOUT_MS", 5s), "shutdown");
  std::vector<Rank> silent;
  for (std::size_t i = 0; i < acks.size(); ++i) {
    bool acknowledged = false;
    if (acks[i].isReady()) {
      try {
        acks[i].get();
        acknowledged = true;
      } catch (const std::exception&) {
      }
    }
    if (!acknowledged) silent.push_back(asked[i]);
  }
  return silent;
}

}  // namespace

int serveUntilShutdown(Runtime& runtime) {
  Proc& proc = runtime.proc();
  auto& lifecycle = detail::Lifecycle::of(proc);
  lifecycle.startWatchdog();
  int code = lifecycle.waitForShutdown();
  if (code != 0 && !proc.alive(0)) log::get().error("the controller (rank 0) was lost; exiting");
  runtime.finish(code);
  return code;
}

namespace {
// Under mpirun --enable-recovery the launcher exits 0 whatever happened, so
// crownrun asks the controller for the job's outcome through this file: the
// code on the first line (all an older crown wrote), then "lost RANK HOST"
// for each rank lost, so that crownrun can name the hosts when it has to
// end a launcher that waits on them for good (docs/crownrun.md). Written to
// a neighbour and renamed, so that crownrun never reads half of it.
void recordResult(int code, const std::vector<std::pair<Rank, std::string>>& lost) {
  const char* path = std::getenv("CROWN_RESULT_FILE");
  if (path == nullptr || *path == '\0') return;
  std::string partial = std::string(path) + ".tmp";
  bool written = false;
  if (std::FILE* file = std::fopen(partial.c_str(), "w")) {
    written = std::fprintf(file, "%d\n", code) > 0;
    for (const auto& [rank, host] : lost) {
      written = written && std::fprintf(file, "lost %u %s\n", static_cast<unsigned>(rank),
                                        host.empty() ? "?" : host.c_str()) > 0;
    }
    written = std::fclose(file) == 0 && written;
    written = written && std::rename(partial.c_str(), path) == 0;
    if (!written) std::remove(partial.c_str());
  }
  if (!written) log::get().warn("cannot write the job's result to CROWN_RESULT_FILE={}", path);
}

// The ranks that joined and are lost now.
std::vector<Rank> lostRanks(Proc& proc) {
  std::vector<Rank> lost;
  for (Rank r = 1; r < proc.size(); ++r) {
    // A rank whose procs were stopped (ProcMesh.stop) left; it was not lost.
    if (proc.joined(r) && !proc.alive(r) && !proc.departing(r)) lost.push_back(r);
  }
  return lost;
}

// `ranks`, sorted, each with its host (one word).
std::vector<std::pair<Rank, std::string>> withHosts(Proc& proc, std::vector<Rank> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::pair<Rank, std::string>> named;
  for (Rank r : ranks) {
    std::string host = proc.host(r);
    std::replace_if(
        host.begin(), host.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); },
        '_');
    named.emplace_back(r, host);
  }
  return named;
}
}  // namespace

namespace {
// finishController runs once: the first caller (crown.shutdown, the job
// ender of job_ender.h) runs it, a later one waits until it is done.
std::atomic<bool> g_finishBegun{false};
std::atomic<bool> g_finishDone{false};
}  // namespace

bool detail::controllerFinishBegun() { return g_finishBegun.load(); }

void finishController(Runtime& runtime, int code) {
  if (g_finishBegun.exchange(true)) {  // test-and-set: two callers never both run it
    g_finishDone.wait(false);
    return;
  }
  struct Done {
    ~Done() {
      g_finishDone.store(true);
      g_finishDone.notify_all();
    }
  } done;
  if (runtime.finishing()) return;  // shut down already (crown.shutdown called twice)
  Proc& proc = runtime.proc();
  std::vector<Rank> lost = lostRanks(proc);
  recordResult(code, withHosts(proc, lost));  // now: whatever the shutdown does next
  detail::Lifecycle::of(proc).requestShutdown(code);  // from here on, links closing are expected
  std::vector<Rank> silent = shutDownWorkers(proc, code);
  // A rank whose loss the controller had not seen yet (its heartbeats stop
  // within the same bound as the acks) is named too, so that the file is
  // complete before Runtime::finish, which may take a bound of its own.
  // (Ranks that acknowledged and exited are not lost: none is taken from
  // Proc::alive after the shutdown began.)
  if (!silent.empty()) {
    lost.insert(lost.end(), silent.begin(), silent.end());
    recordResult(code, withHosts(proc, lost));
  }
  runtime.finish(code);
}

int run(int argc, char** argv, const std::function<void(Controller&)>& main) {
  Runtime* runtime = nullptr;
  try {
    runtime = &Runtime::init(&argc, &argv);
  } catch (const std::exception& e) {
    if (!Runtime::failureReported()) std::cerr << e.what() << std::endl;
    return 1;
  }
  if (runtime->topology().rank != 0) return serveUntilShutdown(*runtime);

  int code = 0;
  try {
    Controller controller(*runtime);
    main(controller);
  } catch (const std::exception& e) {
    std::cout << std::flush;
    std::cerr << "crown: the controller failed: " << e.what() << std::endl;
    code = 1;
  } catch (...) {
    std::cout << std::flush;
    std::cerr << "crown: the controller failed: an exception that is not a std::exception" << std::endl;
    code = 1;
  }
  finishController(*runtime, code);
  return code;
}

}  // namespace crown
