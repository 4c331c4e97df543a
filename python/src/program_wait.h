// ProgramWait: marks a binding's wait as the controller program's (outside
// any actor's handler), so that the end of the job after an unhandled fault
// fails it with UnhandledFault instead of leaving main blocked
// (common/abortable.h, supervision/job_end.h). An actor's waits are not
// marked: they end with the job, not with an error of their own. Put it
// beside the gil_scoped_release of a wait that the user's program makes.
#pragma once

#include <optional>

#include "crown/actor/actor.h"
#include "crown/common/abortable.h"

namespace crown::python {

class ProgramWait {
 public:
  ProgramWait() {
    if (Actor::current() == nullptr) scope_.emplace();
  }

 private:
  std::optional<AbortableScope> scope_;
};

}  // namespace crown::python
