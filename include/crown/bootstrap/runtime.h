// Runtime: what crown sets up in every process of an SPMD launch (design.md,
// "Process model"): MPI (or the MPI mpi4py already initialised), the
// topology, the job secret, the authenticated TCP fabric, and this rank's
// Proc. After bootstrap only the MPI service thread calls MPI (THR-1): other
// code reaches MPI through onMpiThread(), or the service's asynchronous
// operations through Proc::mpi() (crown/actor/mpi_service.h).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/transport/transport.h"

namespace crown {

struct Topology {
  Rank rank = 0;
  Rank size = 1;
  int hostIndex = 0;  ///< index of this rank's host, in order of first appearance by rank
  int hostCount = 1;
  int localRank = 0;  ///< rank among the processes of this host
  int localSize = 1;
  std::vector<std::string> hostNames;  ///< host name of every rank
  std::vector<int> hostIndexOf;        ///< host index of every rank
};

class Runtime {
 public:
  /// Bootstraps this process. Collective over MPI_COMM_WORLD: every rank must
  /// call it. Throws BootstrapError, with the same message on every rank,
  /// naming the rank and cause, when any rank fails.
  static Runtime& init(int* argc, char*** argv);
  /// The runtime of this process; throws crown::Error before init.
  static Runtime& current();
  /// True when init failed and has printed why on this rank already (every
  /// rank prints before any exits).
  static bool failureReported();

  const Topology& topology() const { return topology_; }
  Proc& proc() { return *proc_; }
  /// Where this rank listens, per fabric backend: ("tcp", "ip:port") and,
  /// with a same-host socket, ("unix", "name\nhost"); transport.h.
  const transport::Addresses& addresses() const { return addresses_; }

  /// False when crown adopted an MPI that the program initialised (mpi4py):
  /// then its owner finalises it, at its own exit.
  bool ownsMpi() const;

  /// Runs `fn` on the MPI service thread and waits for it (THR-1).
  void onMpiThread(std::function<void()> fn);

  /// Stops actors, flushes links, finalises MPI if crown initialised it. Bounded:
  /// past CROWN_SHUTDOWN_TIMEOUT_MS (default 30000) the process exits with `code`.
  /// Once: a second call (a program that shuts down twice) returns at once,
  /// since MPI cannot be finalised twice.
  void finish(int code);
  /// finish() has begun.
  bool finishing() const { return finishing_.load(); }

  ~Runtime();

 private:
  Runtime();
  [[noreturn]] static void failBootstrap(Runtime& self, const std::string& why);
  struct Mpi;
  std::unique_ptr<Mpi> mpi_;
  Topology topology_;
  transport::Addresses addresses_;
  std::unique_ptr<Proc> proc_;
  std::atomic<bool> finishing_{false};
};

}  // namespace crown
