#include "bootstrap/departure.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace crown::detail {
namespace {

using namespace std::chrono_literals;

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
// How long a dying process waits for its notices to be written.
constexpr auto kLastWordsBound = 1000ms;

transport::Transport* g_fabric = nullptr;
pid_t g_pid = 0;  // a forked child inherits the hooks, and must not speak on its parent's links
std::function<bool()> g_orderly;
int g_pipe[2] = {-1, -1};
std::atomic<bool> g_spoken{false};                // the notice thread is done, either way
std::atomic_flag g_departing = ATOMIC_FLAG_INIT;  // the first death speaks; the rest do not wait
struct sigaction g_previous[NSIG];

void say(const std::string& words) {
  if (!g_orderly()) g_fabric->depart(words, kLastWordsBound);
}

std::string signalWords(int signal) {
  const char* name = sigabbrev_np(signal);
  const char* what = sigdescr_np(signal);
  std::string words = name ? std::string("SIG") + name : "signal " + std::to_string(signal);
  return "killed by " + words + (what ? std::string(" (") + what + ")" : "");
}

// Blocks the fatal signals that arrive from outside (kill, raise), so that
// the kernel hands them to another thread: this one must be free to speak.
void noticeThread() {
  sigset_t blocked;
  sigemptyset(&blocked);
  for (int signal : kFatalSignals) sigaddset(&blocked, signal);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  for (;;) {
    int signal = 0;
    ssize_t n = ::read(g_pipe[0], &signal, sizeof signal);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof signal) return;
    say(signalWords(signal));
    g_spoken = true;
  }
}

// Async-signal-safe: write, nanosleep, sigaction, raise.
void onFatalSignal(int signal) {
  int saved = errno;
  if (::getpid() == g_pid && !g_departing.test_and_set()) {
    ssize_t written = ::write(g_pipe[1], &signal, sizeof signal);
    constexpr auto kStep = 1ms;
    for (auto waited = 0ms;
         written == sizeof signal && !g_spoken && waited < kLastWordsBound + 100ms;
         waited += kStep) {
      timespec step{0, std::chrono::nanoseconds(kStep).count()};
      ::nanosleep(&step, nullptr);
    }
  }
  ::sigaction(signal, &g_previous[signal], nullptr);
  errno = saved;
  // Pending until this handler returns; a fault's instruction also faults again.
  ::raise(signal);
}

void onExit(int code, void*) {
  if (::getpid() != g_pid || g_departing.test_and_set()) return;  // or a signal handler speaks
  say("exited with code " + std::to_string(code));
}

}  // namespace

void installLastWords(transport::Transport& fabric, std::function<bool()> orderly) {
  if (g_fabric != nullptr) return;
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return;  // no last words, and no harm done
  g_fabric = &fabric;
  g_pid = ::getpid();
  g_orderly = std::move(orderly);
  std::thread(noticeThread).detach();
  ::on_exit(onExit, nullptr);
  struct sigaction action {};
  action.sa_handler = onFatalSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_ONSTACK;
  for (int signal : kFatalSignals) {
    struct sigaction& previous = g_previous[signal];
    ::sigaction(signal, nullptr, &previous);
    bool handled = (previous.sa_flags & SA_SIGINFO) || previous.sa_handler != SIG_DFL;
    // An ignored signal stays ignored, and a program's own SIGTERM handler
    // may well not exit: only a death is announced. The handlers of faults
    // (Open MPI's, faulthandler's) report and die, so they are chained.
    if (previous.sa_handler == SIG_IGN || (signal == SIGTERM && handled)) continue;
    ::sigaction(signal, &action, nullptr);
  }
}

}  // namespace crown::detail
