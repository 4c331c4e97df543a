#include "bootstrap/job_ender.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "crown/bootstrap/controller.h"
#include "crown/bootstrap/runtime.h"
#include "crown/common/env.h"
#include "crown/supervision/job_end.h"

namespace crown::detail {

void installJobEnder(Runtime& runtime) {
  supervision::setJobEnder([&runtime](supervision::FaultClock::time_point since) {
    std::thread([&runtime, since] {
      auto grace = supervision::faultGrace();
      std::this_thread::sleep_until(since + grace);
      // The program is shutting down: finishController and Runtime::finish
      // keep their own bounds.
      if (controllerFinishBegun()) return;
      supervision::abandonProgram();  // Python's actors are dropped without the GIL
      std::cerr << "crown: the controller's program did not end within " << grace.count()
                << " ms of the unhandled failure (CROWN_FAULT_GRACE_MS); ending the job"
                << std::endl;
      // Whatever the shutdown waits on (the GIL, a lost peer), the job ends.
      auto bound = env::millis("CROWN_FLUSH_TIMEOUT_MS", std::chrono::seconds(5)) +
                   std::chrono::seconds(1);
      std::thread([bound] {
        std::this_thread::sleep_for(bound);
        std::fflush(nullptr);
        ::_exit(1);
      }).detach();
      finishController(runtime, 1);
      auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
          supervision::FaultClock::now() - since);
      std::cerr << "crown: ended the job " << took.count() << " ms after the unhandled failure"
                << std::endl;
      std::fflush(nullptr);
      ::_exit(1);
    }).detach();
  });
}

}  // namespace crown::detail
