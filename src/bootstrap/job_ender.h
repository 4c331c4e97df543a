// The controller's job ender (supervision/job_end.h's seam, filled here on
// rank 0): at the first fault nothing handled, if the program has not begun
// its shutdown (finishController) within CROWN_FAULT_GRACE_MS, it ends the
// job itself with code 1 (finishController, then _exit), so that a main
// stuck in C code holding the GIL cannot keep the job alive (SHT-1).
#pragma once

namespace crown {
class Runtime;
namespace detail {

/// On rank 0, once bootstrap is done.
void installJobEnder(Runtime& runtime);

/// Whether finishController has begun (run.cpp's guard).
bool controllerFinishBegun();

}  // namespace detail
}  // namespace crown
