// Replacing lost ranks (issue 13; docs/supervision.md, "Replacing lost
// ranks"). The controller starts one new process per lost rank with
// MPI_Comm_spawn; the process runs the same program, finds it has an MPI
// parent, and joins the fabric in a spare rank slot instead of bootstrapping
// with MPI_COMM_WORLD: over the intercommunicator the controller sends it a
// JoinOffer (the job secret, its slot, every rank's host and address), it
// listens and answers with its own address (JoinAnswer), and both sides
// disconnect. The secret travels over MPI only (SEC-1), as at bootstrap.
//
// A replacement takes a new rank number, never the lost one's: a message
// still in flight to the lost rank must not reach its successor (ORD-1
// and DLV-1 hold per rank, for the life of one process). Only the
// controller's MPI service thread calls spawnReplacement, and only a
// spawned process calls receiveOffer and sendAnswer (THR-1: on its own
// service thread, during init).
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
  std::vector<Rank> joined;            // earlier replacements, alive now
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& secret& rank& slots& launched& hosts& addresses& lost& joined;
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
/// needs Open MPI's mpirun, whose runtime (the HNP) places new processes;
/// a job started by srun, or a singleton, has none.
std::string spawnRefusal();

/// On the controller's MPI service thread: starts one process of this same
/// program (this executable and arguments, in this working directory), on
/// `host` if the launcher takes it there and anywhere it can otherwise,
/// hands it `offer`, and returns its answer. Throws BootstrapError when MPI
/// cannot start it, or when it does not answer within `timeout`.
JoinAnswer spawnReplacement(const JoinOffer& offer, const std::string& host,
                            std::chrono::milliseconds timeout);

/// In any process, after MPI_Init: the intercommunicator to the process
/// that spawned this one, or MPI_COMM_NULL when the launcher started it.
MPI_Comm spawnParent();

/// In a spawned process: the controller's offer (blocks until it comes).
JoinOffer receiveOffer(MPI_Comm parent);

/// In a spawned process: answers the offer and disconnects from the parent.
void sendAnswer(MPI_Comm parent, const JoinAnswer& answer);

}  // namespace crown::detail

CROWN_MESSAGE(crown::detail::JoinOffer, "crown::JoinOffer");
CROWN_MESSAGE(crown::detail::JoinAnswer, "crown::JoinAnswer");
