#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "bootstrap/lifecycle.h"
#include "crown/bootstrap/controller.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

// Tells every live worker to exit with `code` and waits for their acks, so
// that none is still serving when rank 0 finalises.
void shutDownWorkers(Proc& proc, int code) {
  auto& lifecycle = detail::Lifecycle::of(proc);
  std::vector<Future<void>> acks;
  detail::Shutdown shutdown{code, lifecycle.ranksLost()};
  for (Rank r = 1; r < proc.size(); ++r) {
    if (proc.alive(r)) acks.push_back(proc.request<void>({r, lifecycle.agentId()}, shutdown));
  }
  detail::awaitAcks(acks, env::millis("CROWN_FLUSH_TIMEOUT_MS", 5s), "shutdown");
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
// crownrun asks the controller for the job's outcome through this file.
void recordResult(int code) {
  const char* path = std::getenv("CROWN_RESULT_FILE");
  if (path == nullptr || *path == '\0') return;
  if (std::FILE* file = std::fopen(path, "w")) {
    std::fprintf(file, "%d\n", code);
    std::fclose(file);
  } else {
    log::get().warn("cannot write the job's result to CROWN_RESULT_FILE={}", path);
  }
}
}  // namespace

void finishController(Runtime& runtime, int code) {
  if (runtime.finishing()) return;  // shut down already (crown.shutdown called twice)
  recordResult(code);
  Proc& proc = runtime.proc();
  detail::Lifecycle::of(proc).requestShutdown(code);  // from here on, links closing are expected
  shutDownWorkers(proc, code);
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
