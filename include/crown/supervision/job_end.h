// The end of a job whose fault nothing handled (docs/supervision.md, "An
// unhandled fault ends the job"; SHT-1). On the controller, the fault hook
// decides; when it leaves a fault unhandled, faultUnhandled(report):
//   - prints "crown: unhandled failure, ending the job: REPORT" (stderr);
//   - at the first only: fails every abortable wait of the controller's
//     program with UnhandledFault (common/abortable.h), interrupts its main
//     thread once (the front end's interrupter: Python's sends a real SIGINT,
//     which wakes time.sleep, selectors and lock waits), and arms the job
//     ender that bootstrap sets on rank 0, which ends the job with code 1
//     when the program has not begun its shutdown within
//     CROWN_FAULT_GRACE_MS (a main stuck in C code that holds the GIL);
//   - later faults are printed and recorded, and interrupt nothing.
// A hook that cannot even start within the grace (Python's, which needs the
// GIL that main holds) is caught by a HookWatch: its fault counts as
// unhandled. Thread-safe; process-wide.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "crown/common/error.h"

namespace crown::supervision {

using FaultClock = std::chrono::steady_clock;

/// What the controller program's waits fail with once a fault is left
/// unhandled (Python: crown.actor.UnhandledFault, a SystemExit with code 1).
class UnhandledFault : public Error {
 public:
  using Error::Error;
};

/// The fault `report`, which arrived at `since`, is left unhandled: the job
/// ends (above). Only reports and records on a rank with no job ender.
void faultUnhandled(const std::string& report, FaultClock::time_point since = FaultClock::now());

/// The reports of the faults left unhandled on this rank so far, in order.
std::vector<std::string> unhandledFaults();

/// CROWN_FAULT_GRACE_MS (default 1000): how long the controller's program
/// has, after an unhandled fault, to begin its shutdown; and how long a
/// fault hook may take to start.
std::chrono::milliseconds faultGrace();

/// Bootstrap, on the controller: called once, at the first unhandled fault,
/// with when it arrived; it must not block (it arms a thread of its own).
void setJobEnder(std::function<void(FaultClock::time_point since)> ender);

/// A front end, on the controller: wakes the program's main thread, once,
/// at the first unhandled fault.
void setMainInterrupt(std::function<void()> interrupt);

/// The job ender gave up on the program (it ends the job without it): a
/// front end frees nothing that needs the program's cooperation (Python:
/// the GIL) from then on.
void abandonProgram();
bool programAbandoned();

/// Watches a fault hook about to run for `report`: where a job ender is set,
/// a hook that has not start()ed within faultGrace() of the watch's
/// construction counts as unhandled (faultUnhandled, since then).
class HookWatch {
 public:
  explicit HookWatch(std::string report);
  ~HookWatch();
  HookWatch(const HookWatch&) = delete;
  HookWatch& operator=(const HookWatch&) = delete;

  /// The hook starts now; false when too late (its fault was already
  /// counted unhandled): then it must not run.
  bool start();

  struct State;  // job_end.cpp's

 private:
  std::shared_ptr<State> state_;  // shared with the watcher thread
};

}  // namespace crown::supervision
