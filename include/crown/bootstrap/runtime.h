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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "crown/actor/proc.h"
#include "crown/transport/transport.h"

namespace crown {

namespace detail {
struct JoinOffer;   // bootstrap/respawn.h
struct JoinAnswer;  // bootstrap/respawn.h
}
namespace transport {
class IoPool;  // crown/transport/io_pool.h
}
namespace debug {
class DebugServer;  // crown/debug/server.h
}

struct Topology {
  Rank rank = 0;
  Rank size = 1;   ///< ranks of the launch (MPI_COMM_WORLD)
  Rank slots = 1;  ///< rank numbers of the fabric: the launch's, then spares for replacements
  int hostIndex = 0;  ///< index of this rank's host, in order of first appearance by rank
  int hostCount = 1;
  int localRank = 0;  ///< rank among the processes of this host
  int localSize = 1;
  std::vector<std::string> hostNames;  ///< host name of every rank of the launch
  std::vector<int> hostIndexOf;        ///< host index of every rank of the launch
};

class Runtime {
 public:
  /// Bootstraps this process. Collective over MPI_COMM_WORLD: every rank must
  /// call it. Throws BootstrapError, with the same message on every rank,
  /// naming the rank and cause, when any rank fails.
  static Runtime& init(int* argc, char*** argv);
  /// In a process that no launcher started: joins a served job (crownrun
  /// --serve) as a client in the slot of `offer` (its controller's
  /// offerAttach's, its secret still masked by `pad`), listening for its
  /// ranks; returns (host, address) where it listens, for admitAttached.
  /// The client drives the job's ranks as a controller would: it owns the
  /// meshes it spawns. leave() ends its part.
  static std::pair<std::string, std::string> attach(const std::string& offer,
                                                    const std::string& pad);
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

  /// On the controller: starts one process per rank of `lost` (ranks lost
  /// by now) with MPI_Comm_spawn, each joining the fabric in a spare slot
  /// (CROWN_SPARE_RANKS; respawn.h), and returns their new ranks in the same
  /// order once every live rank has admitted them. A rank replaced before
  /// (through another mesh) gives its live replacement again, not a new one.
  /// Throws ConfigError when a
  /// rank is not lost, Error when the launcher cannot spawn (srun) or the
  /// spares are spent, and BootstrapError when a process cannot start or join within
  /// CROWN_RESPAWN_TIMEOUT_MS (default 60000); ranks made before stay joined.
  /// Replacements are outside MPI_COMM_WORLD: no MPI collective or RDMA
  /// window reaches them.
  std::vector<Rank> respawn(const std::vector<Rank>& lost);

  /// On the controller: reserves `count` consecutive spare slots for the
  /// procs of one spawnProcs, and returns their ranks at once. Throws Error
  /// when the launcher cannot spawn (srun) or too few spares are left
  /// (CROWN_SPARE_RANKS; a process no launcher started has 1024).
  std::vector<Rank> reserveProcs(std::size_t count);
  /// On the controller: starts one new process of `program` and `arguments`
  /// (the Python front end passes its worker module) per slot of `slots`
  /// (one reserveProcs), on `host` ("": where the MPI runtime places them),
  /// in one MPI_Comm_spawn, each joining the fabric in its slot, and returns
  /// once every live rank has admitted them. They share an MPI world of
  /// their own (tensor collectives among them run over MPI). Throws
  /// BootstrapError when they cannot start or join within
  /// CROWN_RESPAWN_TIMEOUT_MS; the slots stay spent.
  void spawnProcs(const std::vector<Rank>& slots, const std::string& program,
                  const std::vector<std::string>& arguments, const std::string& host = "");
  /// True when no launcher (mpirun, srun) started this process: MPI makes it
  /// a singleton, whose procs are all started on demand (spawnProcs).
  static bool launchedAlone();
  /// Why this job cannot start processes (srun's), or "" when it can.
  static std::string spawnRefusal();
  /// On the controller: ends the processes of `ranks` (started by
  /// spawnProcs): every live rank is told to expect their departure, they
  /// shut down and exit 0, and this returns once their links are gone (or
  /// after CROWN_SHUTDOWN_TIMEOUT_MS plus a second; then it throws Error).
  /// A rank already gone is skipped. Stop the actors on them first.
  void stopSpawned(const std::vector<Rank>& ranks);

  /// On a served job's controller (runtime_attach.cpp): reserves a spare slot
  /// for a client that proved the job's token, and returns it with the
  /// encoded offer to join in it, whose secret is XORed with `pad` (32
  /// bytes both sides derive from the token, _handshake.py): the secret
  /// never crosses the client's connection in the clear (SEC-1).
  std::pair<Rank, std::string> offerAttach(const std::string& pad);
  /// ... then has every live rank admit the client that listens at `address`.
  void admitAttached(Rank slot, const std::string& host, const std::string& address);
  /// ... and when it detaches (or its connection drops): every live rank
  /// expects its departure, so its links closing are no failure, and it is
  /// gone from then on.
  void releaseAttached(Rank slot);
  /// On an attached client, once the controller released it: stops this
  /// process's actors and links (it started no MPI); the job goes on.
  void leave();
  /// This process is a client attached to a served job (attach()).
  bool attached() const { return attached_; }

  /// Runs `fn` on the MPI service thread and waits for it (THR-1).
  void onMpiThread(std::function<void()> fn);

  /// Stops actors, flushes links, finalises MPI if crown initialised it. Bounded:
  /// past CROWN_SHUTDOWN_TIMEOUT_MS (default 30000) the process exits with `code`.
  /// Once: a second call (a program that shuts down twice) returns at once,
  /// since MPI cannot be finalised twice.
  void finish(int code);
  /// finish() has begun.
  bool finishing() const { return finishing_.load(); }
  /// This rank's shutdown has begun (the controller's word came, or it is
  /// the controller and ends the job): links closing now are expected.
  bool shuttingDown() const;

  ~Runtime();

 private:
  Runtime();
  [[noreturn]] static void failBootstrap(Runtime& self, const std::string& why);
  // init and attach: `attachOffer` (decoded, its secret unmasked) joins a
  // served job as a client, writing where it listens to `answer`.
  static Runtime& start(int* argc, char*** argv, const detail::JoinOffer* attachOffer,
                        detail::JoinAnswer* answer);
  void startProc(std::shared_ptr<const std::vector<std::string>> hosts,
                 std::vector<Rank> lostBefore, std::unique_ptr<transport::Transport> fabric,
                 std::vector<std::string> peers);
  // The controller's offer for slot `slot` (respawn, spawnProcs).
  detail::JoinOffer offerFor(Rank slot) const;
  // The controller admits the joined `slots` (answers[i] is slots[i]'s) and
  // has every other live rank admit them (RankJoined) before anything is
  // sent to them through it.
  void admitJoined(const std::vector<Rank>& slots, const std::vector<detail::JoinAnswer>& answers);
  // Runs the MPI side of a spawn on the service thread; a helper left inside
  // MPI makes MPI unusable here and on every rank (respawn.h).
  void spawnOnMpiThread(const std::string& what, const std::function<void()>& fn);
  Runtime& joinAsReplacement(const detail::JoinOffer& offer,
                             std::unique_ptr<transport::Transport> fabric,
                             const std::string& error);
  struct Mpi;
  std::unique_ptr<Mpi> mpi_;
  Topology topology_;
  transport::Addresses addresses_;
  std::shared_ptr<transport::IoPool> pool_;
  std::unique_ptr<Proc> proc_;
  std::unique_ptr<debug::DebugServer> debugServer_;  // the controller's (crown stacks)
  std::atomic<bool> finishing_{false};
  bool attached_ = false;  // a client of a served job (attach())
  // The controller's, for respawn: what a replacement is offered.
  std::mutex respawnMutex_;
  transport::Secret secret_{};
  std::vector<std::string> slotAddresses_;  // per slot; "" while vacant
  std::vector<Rank> joined_;                // replacements and spawned ranks, in joining order
  std::map<Rank, Rank> replacedBy_;         // lost rank -> the rank that replaced it
  Rank nextSlot_ = 0;
};

}  // namespace crown
