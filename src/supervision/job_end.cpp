// The end of a job whose fault nothing handled (supervision/job_end.h).
#include "crown/supervision/job_end.h"

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "crown/common/abortable.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown::supervision {

struct HookWatch::State {
  std::string report;
  FaultClock::time_point since;
  bool started = false;
  bool expired = false;  // counted unhandled before it started
};

namespace {

// Leaked: the watcher thread and late faults may outlive static destruction.
struct JobEnd {
  std::mutex mutex;  // faults are told one at a time, in the order they come
  std::vector<std::string> unhandled;
  std::function<void(FaultClock::time_point)> ender;
  std::function<void()> interrupt;
  std::atomic<bool> abandoned{false};
  // Hook watches, and the thread that expires them (started at the first).
  std::mutex watchMutex;
  std::condition_variable watchCv;
  std::vector<std::shared_ptr<HookWatch::State>> watches;
  bool watcherRunning = false;
};

JobEnd& jobEnd() {
  static auto* state = new JobEnd;
  return *state;
}

// Expires the watches whose hook has not started within the grace.
void watchHooks() {
  JobEnd& j = jobEnd();
  std::unique_lock lock(j.watchMutex);
  while (true) {
    if (j.watches.empty()) {
      j.watchCv.wait(lock);
      continue;
    }
    auto first = j.watches.front();  // the oldest: watches are added in time order
    if (first->started) {
      j.watches.erase(j.watches.begin());
      continue;
    }
    auto deadline = first->since + faultGrace();
    if (FaultClock::now() < deadline) {
      j.watchCv.wait_until(lock, deadline);
      continue;
    }
    first->expired = true;
    j.watches.erase(j.watches.begin());
    lock.unlock();
    log::get().error("the fault hook did not start within {} ms (the controller's main thread "
                     "holds the GIL?): its fault counts as unhandled",
                     faultGrace().count());
    faultUnhandled(first->report, first->since);
    lock.lock();
  }
}

}  // namespace

std::chrono::milliseconds faultGrace() {
  static const auto grace =
      env::millis("CROWN_FAULT_GRACE_MS", std::chrono::milliseconds(1000),
                  std::chrono::milliseconds(0));
  return grace;
}

void faultUnhandled(const std::string& report, FaultClock::time_point since) {
  JobEnd& j = jobEnd();
  std::function<void(FaultClock::time_point)> ender;
  std::function<void()> interrupt;
  {
    std::lock_guard lock(j.mutex);
    bool first = j.unhandled.empty();
    j.unhandled.push_back(report);
    if (!j.ender) {  // a client attached to a served job: the job is not its to end
      std::cerr << "crown: unhandled failure (calls to it raise; an attached client does not "
                   "end the served job): "
                << report << std::endl;
    } else if (first) {
      std::cerr << "crown: unhandled failure, ending the job: " << report << std::endl;
    } else {
      std::cerr << "crown: unhandled failure (the job is ending already): " << report << std::endl;
    }
    if (!first || !j.ender) return;  // once; and only where the job can be ended
    ender = j.ender;
    interrupt = j.interrupt;
  }
  abortWaits(std::make_exception_ptr(UnhandledFault(
      "the job is ending (exit code 1): a fault was left unhandled: " + report)));
  if (interrupt) interrupt();
  ender(since);
}

std::vector<std::string> unhandledFaults() {
  JobEnd& j = jobEnd();
  std::lock_guard lock(j.mutex);
  return j.unhandled;
}

void setJobEnder(std::function<void(FaultClock::time_point)> ender) {
  JobEnd& j = jobEnd();
  std::lock_guard lock(j.mutex);
  j.ender = std::move(ender);
}

void setMainInterrupt(std::function<void()> interrupt) {
  JobEnd& j = jobEnd();
  std::lock_guard lock(j.mutex);
  j.interrupt = std::move(interrupt);
}

void abandonProgram() { jobEnd().abandoned.store(true); }
bool programAbandoned() { return jobEnd().abandoned.load(); }

HookWatch::HookWatch(std::string report) {
  JobEnd& j = jobEnd();
  {
    std::lock_guard lock(j.mutex);
    if (!j.ender) return;  // no job to end from here: nothing to watch
  }
  state_ = std::make_shared<State>();
  state_->report = std::move(report);
  state_->since = FaultClock::now();
  std::lock_guard lock(j.watchMutex);
  j.watches.push_back(state_);
  if (!j.watcherRunning) {
    j.watcherRunning = true;
    std::thread(watchHooks).detach();
  }
  j.watchCv.notify_all();
}

HookWatch::~HookWatch() {
  if (state_) start();  // a hook that never ran (skipped) is not watched any more
}

bool HookWatch::start() {
  if (!state_) return true;
  JobEnd& j = jobEnd();
  std::lock_guard lock(j.watchMutex);
  if (state_->expired) return false;
  state_->started = true;
  return true;
}

}  // namespace crown::supervision
