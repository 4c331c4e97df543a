// Last words (issue 10): a rank that dies unexpectedly, by exit() or a fatal
// signal, tells every peer it has a link with how ("exited with code 3",
// "killed by SIGSEGV (Segmentation fault)") in a departing notice
// (wire::kNoticeDeparting), so that the survivors, above all the controller,
// name the cause when they report it lost (ProcessLost, SupervisionError).
//
// A signal handler may not seal or write frames (it may have interrupted a
// thread that holds a link's mutex, or malloc's), so it only writes the
// signal's number to a pipe and waits, at most kLastWordsBound, for a thread
// of its own to send the notice the usual way; then it puts the previous
// handler back and raises the signal again, so the process dies of it as it
// would have (Open MPI's and Python's faulthandler reports still run). If the
// notice thread is stuck behind the dying thread's locks, the wait ends and
// the death is only silent. SIGKILL (the OOM killer) and _exit (Python's
// os._exit) run no code at all: peers then say the rank left no last words.
// A forked child inherits the hooks (and the pipe) but says nothing: the
// links are its parent's. An ignored signal stays ignored, and a SIGTERM
// the program handles itself is left to it, since it need not exit.
#pragma once

#include <functional>

#include "crown/transport/transport.h"

namespace crown::detail {

/// Installs the exit hook (glibc's on_exit, which sees the exit code) and
/// the handlers of SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT and SIGTERM,
/// once per process. `fabric` must outlive the process's exit handlers;
/// `orderly()` is true once this rank's shutdown has begun, when an exit is
/// expected and nothing is said.
void installLastWords(transport::Transport& fabric, std::function<bool()> orderly);

}  // namespace crown::detail
