// SHT-1: when the controller process dies, the workers notice the lost link
// and exit by themselves (under mpirun --enable-recovery nothing else would
// stop them), so no process is left behind.
#include <signal.h>

#include <iostream>

#include "test_actors.h"

int main(int argc, char** argv) {
  return crown::run(argc, argv, [](crown::Controller& ctl) {
    auto workers = ctl.spawnOnEveryRank<crown::testing::Worker>("worker", std::string("d"));
    for (auto& worker : workers)
      worker.call<crown::testing::Identity>(crown::testing::WhoAreYou{}).get();
    std::cout << "controller: every worker answered; dying now" << std::endl;
    ::raise(SIGKILL);
  });
}
