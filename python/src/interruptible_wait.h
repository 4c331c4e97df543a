// waitInterruptibly: Future::get for the Python program's waits, which a
// signal can end. Python runs its signal handlers (SIGINT's
// KeyboardInterrupt: Ctrl-C, a notebook's Kernel > Interrupt) only between
// bytecodes on the main thread, so a wait that keeps the GIL released until
// the reply comes cannot be interrupted. This one waits in slices of
// kSignalSlice and, between them, lets Python's handlers run
// (PyErr_CheckSignals, which does nothing on other threads); a handler that
// raises cancels the request (a late reply is dropped) and the exception
// goes up. Called with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>
#include <string>

#include "crown/actor/future.h"
#include "program_wait.h"
#include "wait_entries.h"

namespace crown::python {

inline constexpr std::chrono::milliseconds kSignalSlice{100};

template <class T>
T waitInterruptibly(const Future<T>& future, std::optional<double> timeout) {
  namespace py = pybind11;
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> deadline;
  if (timeout) deadline = Clock::now() + toMillis(*timeout);
  for (;;) {
    {
      py::gil_scoped_release release;  // once per slice: the usual reply comes within the first
      ProgramWait abortable;            // the end of the job fails it with UnhandledFault
      auto until = Clock::now() + kSignalSlice;
      if (deadline && *deadline < until) until = *deadline;
      if (future.state().waitUntil(until)) return future.get();  // its value, or its error
    }
    if (PyErr_CheckSignals() != 0) {
      future.state().cancel();
      throw py::error_already_set();
    }
    if (deadline && Clock::now() >= *deadline) {
      // Failed with Timeout, the next slice returns it at once.
      future.state().cancel();
      future.state().setError(std::make_exception_ptr(
          Timeout("no reply within " + std::to_string(toMillis(*timeout).count()) + " ms")));
    }
  }
}

}  // namespace crown::python
