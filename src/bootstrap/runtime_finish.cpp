// The Runtime's shutdown (crown/bootstrap/runtime.h, finish()): the
// controller's trace first (CROWN_TRACE), while every rank still serves;
// then SHT-1's bound, the shutdown word, the barrier, the links, MPI.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>

#include "bootstrap/lifecycle.h"
#include "bootstrap/mpi_check.h"
#include "bootstrap/runtime_mpi.h"
#include "crown/actor/mpi_service.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/debug/server.h"
#include "crown/debug/trace.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

// How long a failed job's shutdown waits on handlers still running and on
// queued frames (CROWN_FLUSH_TIMEOUT_MS, if shorter, instead).
constexpr int kFailedJobFlushMs = 200;

// Said on the controller's terminal whatever the log level: the user asked
// for the file and needs to know where it went, or why it did not.
void writeTrace(Proc& proc, const detail::TraceSetup& setup) {
  try {
    auto started = std::chrono::steady_clock::now();
    debug::TraceWritten written = debug::writeTrace(proc, setup.path, setup.offsetsNs,
                                                    env::millis("CROWN_TRACE_TIMEOUT_MS", 10s));
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started);
    std::cerr << "crown: wrote the trace of " << written.ranks << " ranks (" << written.events
              << " events) to " << setup.path << " in " << took.count() << " ms" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "crown: no trace written (CROWN_TRACE=" << setup.path << "): " << e.what()
              << std::endl;
  }
}

}  // namespace

void Runtime::finish(int code) {
  if (finishing_.exchange(true)) {
    log::get().debug("shutdown: already under way");
    return;
  }
  debugServer_.reset();  // its socket and token go first: the job is ending
  if (proc_ && topology_.rank == 0 && !mpi_->trace.path.empty()) writeTrace(*proc_, mpi_->trace);
  auto timeout = env::millis("CROWN_SHUTDOWN_TIMEOUT_MS", 30s);
  // SHT-1: no process is left behind, even when a peer or MPI hangs.
  std::thread([timeout, code] {
    std::this_thread::sleep_for(timeout);
    log::get().error("shutdown did not finish within {} ms; exiting with code {}", timeout.count(),
                     code);
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(code);
  }).detach();

  bool peerLost = false;
  if (proc_) {
    auto& lifecycle = detail::Lifecycle::of(*proc_);
    lifecycle.requestShutdown(code);  // from here on, links closing are expected
    peerLost = lifecycle.ranksLost();
    // Every rank marks itself shutting down before any closes its links, so
    // no survivor takes a neighbour's orderly exit for a crash.
    if (!peerLost) {
      // Nonblocking, so that a rank lost now fails it (abandonPeer) rather
      // than freezing the service thread.
      try {
        mpi_->service->barrier(Comm::world()).get();
      } catch (const ProcessLost& e) {
        log::get().warn("shutdown: the MPI barrier lost a rank: {}", e.what());
        peerLost = true;
      } catch (const std::exception& e) {
        log::get().error("shutdown: MPI_Ibarrier failed: {}", e.what());
      }
    }
    auto flush = env::millis("CROWN_FLUSH_TIMEOUT_MS", 5s);
    if (code != 0) {
      // A failed job (main raised, or a fault nothing handled ended it,
      // perhaps while main waited on one of them) does not wait on
      // handlers still running: nobody is left for their results.
      flush = std::min(flush, std::chrono::milliseconds(kFailedJobFlushMs));
      pool_->setStopBound(flush);
    }
    proc_->stop(flush);
  }
  std::fflush(stdout);
  if (peerLost && mpi_->ownsMpi) {
    // MPI_Finalize synchronises with every rank, and a lost one never comes.
    log::get().info("a rank was lost: exiting without MPI_Finalize");
    std::fflush(stderr);
    ::_exit(code);
  }
  if (std::string why = mpi_->service->unusable(); !why.empty()) {
    // A thread is still inside MPI (respawn.h): MPI_Finalize, here or at
    // exit (mpi4py's, when the program owns MPI), would wait for it for good.
    log::get().info("exiting without MPI_Finalize: {}", why);
    std::fflush(stderr);
    ::_exit(code);
  }
  // The service fails what is still pending and frees its communicators
  // first. A failed step is logged and shutdown goes on: the process is
  // leaving anyway, and its exit code is already decided.
  try {
    mpi_->service->finalize([this] {
      if (mpi_->comm != MPI_COMM_NULL) CROWN_CHECK_MPI(MPI_Comm_free(&mpi_->comm));
      if (mpi_->ownsMpi) CROWN_CHECK_MPI(MPI_Finalize());  // an adopted MPI: its owner's
    });
  } catch (const std::exception& e) {
    log::get().error("shutdown: MPI_Finalize failed: {}", e.what());
  }
}

}  // namespace crown
