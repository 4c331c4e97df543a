// Starting processes after the launch: replacements for lost ranks (issue
// 13; docs/supervision.md, "Replacing lost ranks") and, in a process no
// launcher started, the procs of spawn_procs (issue 46; docs/processes.md).
// The controller starts one new process per lost rank with
// MPI_Comm_spawn; the process runs the same program, finds it has an MPI
// parent, and joins the fabric in a spare rank slot instead of bootstrapping
// with MPI_COMM_WORLD: over the intercommunicator the controller sends it a
// JoinOffer (the job secret, its slot, every rank's host and address), it
// listens and answers with its own address (JoinAnswer), and both sides
// disconnect. The secret travels over MPI only (SEC-1), as at bootstrap.
//
// spawn_procs starts N processes in one MPI_Comm_spawn, so that they share
// an MPI world of their own (their MPI_COMM_WORLD, of ranks groupFirst ..
// groupFirst + groupSize - 1 in crown's numbering): tensor collectives among
// them run over MPI; the controller and other groups are outside it.
//
// A replacement takes a new rank number, never the lost one's: a message
// still in flight to the lost rank must not reach its successor (ORD-1
// and DLV-1 hold per rank, for the life of one process). Only the
// controller's MPI service thread calls spawnReplacement, and only a
// spawned process calls receiveOffer and sendAnswer (THR-1: on its own
// service thread, during init).
//
// A replacement may die before MPI_Init completes (issue 43): Open MPI 4.1's
// MPI_Comm_spawn then waits for it for good (PMIx's connect, which nothing
// can interrupt). So spawnReplacement runs the MPI side of the join on a
// helper thread while the service thread waits for it, calling no MPI
// itself (MPI_THREAD_SERIALIZED: one thread in MPI at a time, THR-1's
// point). A helper still inside MPI at the timeout is left behind, and
// spawnReplacement throws SpawnAbandoned: the caller must then never call
// MPI again in this process (MpiService::markUnusable).
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

#include "crown/common/error.h"  // Rank
#include "crown/wire/serialize.h"

namespace crown::detail {

/// What the controller tells a replacement.
struct JoinOffer {
  std::string secret;  // the job's fabric secret (transport::Secret's bytes)
  Rank rank = 0;       // the slot it takes
  Rank slots = 0;      // rank slots of the job (launched ones and spares)
  Rank launched = 0;   // ranks of MPI_COMM_WORLD: [0, launched)
  std::vector<std::string> hosts;      // per slot; "" for a vacant one
  std::vector<std::string> addresses;  // per slot, as each transport gave it; "" when vacant
  std::vector<Rank> lost;              // ranks lost by now
  std::vector<Rank> joined;            // earlier replacements and spawned ranks, alive now
  // spawn_procs: the ranks started together, whose MPI_COMM_WORLD this
  // process shares; groupSize 0 for a replacement (outside any MPI world).
  Rank groupFirst = 0;
  Rank groupSize = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& secret& rank& slots& launched& hosts& addresses& lost& joined& groupFirst& groupSize;
  }
};

/// What the replacement answers: where it listens, or why it cannot.
struct JoinAnswer {
  std::string host;
  std::string address;
  std::string error;  // empty when it joined
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& host& address& error;
  }
};

/// Why this job cannot start processes ("" when it can): MPI_Comm_spawn
/// needs an Open MPI runtime (the HNP) to place new processes: mpirun's, or
/// the one a singleton (a process no launcher started) starts for itself;
/// a job started by srun has none.
std::string spawnRefusal();

/// True when no launcher started this process (a plain `python3`, a
/// notebook's kernel): MPI makes it a singleton.
bool launchedAlone();

/// In a singleton, before MPI_Init: lets the runtime it starts place more
/// processes than cores and keep a spawned group's survivors when one of
/// them dies (Open MPI's defaults abort the whole group), unless the user
/// set these parameters.
void prepareSingletonSpawns();

/// What MPI_Comm_spawn runs, and where.
struct SpawnCommand {
  std::string program;                 // a path, as execve takes it
  std::vector<std::string> arguments;  // without argv[0]
  std::string host;                    // "" for anywhere the runtime places it
};

/// This process's own program and arguments (a replacement runs the same
/// program again), on `host`.
SpawnCommand sameProgram(const std::string& host);

/// spawnReplacement's failure that leaves MPI unusable in this process: a
/// helper thread is still inside an MPI call that cannot be abandoned.
class SpawnAbandoned : public BootstrapError {
 public:
  SpawnAbandoned(const std::string& message, std::string cause)
      : BootstrapError(message), cause_(std::move(cause)) {}
  /// What was abandoned, in a few words ("Open MPI's MPI_Comm_spawn for
  /// rank 4 (still inside MPI past 8000 ms, ...)"), for markUnusable's reason.
  const std::string& cause() const { return cause_; }

 private:
  std::string cause_;
};

/// On the controller's MPI service thread: starts one process of this same
/// program (this executable and arguments, in this working directory), on
/// `host` if the launcher takes it there and anywhere it can otherwise,
/// hands it `offer`, and returns its answer, all within `timeout` (plus
/// kAbandonGrace). Throws BootstrapError when MPI cannot start it, or when
/// it does not answer in time; SpawnAbandoned when MPI itself did not
/// return in time (the process died before MPI_Init, say), after which no
/// thread of this process may call MPI.
JoinAnswer spawnReplacement(const JoinOffer& offer, const std::string& host,
                            std::chrono::milliseconds timeout);

/// Like spawnReplacement, for offers.size() processes of `command` started
/// together (one MPI_Comm_spawn: process i takes offers[i]); their answers,
/// in the same order.
std::vector<JoinAnswer> spawnProcesses(const std::vector<JoinOffer>& offers,
                                       const SpawnCommand& command,
                                       std::chrono::milliseconds timeout);

/// How long after its timeout spawnReplacement still waits for a helper
/// thread to come out of MPI before it leaves it behind.
inline constexpr std::chrono::milliseconds kAbandonGrace{1000};

/// In any process, after MPI_Init: the intercommunicator to the process
/// that spawned this one, or MPI_COMM_NULL when the launcher started it.
MPI_Comm spawnParent();

/// In a spawned process: the controller's offer. Throws BootstrapError when
/// none comes within CROWN_RESPAWN_TIMEOUT_MS (the controller gave up on
/// this process), so that it exits rather than wait for ever.
JoinOffer receiveOffer(MPI_Comm parent);

/// In a spawned process: answers the offer and disconnects from the parent.
void sendAnswer(MPI_Comm parent, const JoinAnswer& answer);

}  // namespace crown::detail

CROWN_MESSAGE(crown::detail::JoinOffer, "crown::JoinOffer");
CROWN_MESSAGE(crown::detail::JoinAnswer, "crown::JoinAnswer");
