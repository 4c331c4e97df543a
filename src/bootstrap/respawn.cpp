#include "bootstrap/respawn.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>

#include "bootstrap/mpi_check.h"
#include "crown/common/env.h"
#include "crown/common/log.h"

namespace crown::detail {
namespace {

constexpr int kOfferTag = 1;
constexpr int kAnswerTag = 2;

// This process's program and arguments, as the kernel has them: a Python
// program is spawned as `python3 train.py ...` again, whatever launched it.
std::string thisProgram() {
  char path[4096] = {};
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) throw BootstrapError("respawn: cannot read /proc/self/exe");
  return std::string(path, static_cast<std::size_t>(length));
}

std::vector<std::string> thisArguments() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> words;
  std::size_t start = 0;
  while (start < all.size()) {
    std::size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    words.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  if (!words.empty()) words.erase(words.begin());  // argv[0]: MPI_Comm_spawn takes the program
  return words;
}

// `peer`: a rank of the other side of the intercommunicator (the spawned
// processes; the controller is 0 of its own side).
void sendBytes(MPI_Comm comm, int peer, int tag, const wire::Bytes& bytes) {
  std::uint64_t length = bytes.size();
  CROWN_CHECK_MPI(MPI_Send(&length, 1, MPI_UINT64_T, peer, tag, comm));
  CROWN_CHECK_MPI(
      MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, tag, comm));
}

wire::Bytes receiveRest(MPI_Comm comm, int peer, int tag, std::uint64_t length) {
  wire::Bytes bytes(static_cast<std::size_t>(length), '\0');
  CROWN_CHECK_MPI(MPI_Recv(bytes.data(), static_cast<int>(length), MPI_BYTE, peer, tag, comm,
                           MPI_STATUS_IGNORE));
  return bytes;
}

// Tests `request` until it completes (true) or `deadline` passes (false:
// then it is cancelled and freed). A peer that died before it sent leaves a
// blocking receive waiting for good.
bool completedBy(MPI_Request& request, std::chrono::steady_clock::time_point deadline) {
  for (int done = 0;;) {
    CROWN_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

int spawnAll(const SpawnCommand& command, int count, MPI_Comm& child) {
  std::vector<std::string> arguments = command.arguments;
  std::vector<char*> argv;
  for (auto& word : arguments) argv.push_back(word.data());
  argv.push_back(nullptr);
  char cwd[4096] = {};
  MPI_Info info;
  CROWN_CHECK_MPI(MPI_Info_create(&info));
  if (::getcwd(cwd, sizeof cwd) != nullptr) MPI_Info_set(info, "wdir", cwd);
  if (!command.host.empty()) MPI_Info_set(info, "host", command.host.c_str());
  std::vector<int> errors(static_cast<std::size_t>(count), MPI_SUCCESS);
  int code = MPI_Comm_spawn(command.program.c_str(), argv.data(), count, info, 0, MPI_COMM_SELF,
                            &child, errors.data());
  MPI_Info_free(&info);
  if (code != MPI_SUCCESS) return code;
  for (int error : errors)
    if (error != MPI_SUCCESS) return error;
  return MPI_SUCCESS;
}

// "rank 4", or "ranks 4-7": whom the processes of one spawn were for.
std::string whom(const std::vector<JoinOffer>& offers) {
  if (offers.size() == 1) return "rank " + std::to_string(offers.front().rank);
  return "ranks " + std::to_string(offers.front().rank) + "-" + std::to_string(offers.back().rank);
}

std::string processes(const std::vector<JoinOffer>& offers) {
  return offers.size() == 1 ? "the process" : std::to_string(offers.size()) + " processes";
}

// What started them, for errors: replacements (groupSize 0) or spawn_procs.
std::string starter(const std::vector<JoinOffer>& offers) {
  return offers.front().groupSize == 0 ? "respawn" : "spawn_procs";
}

// mpirun and srun (with PMIx or PMI) leave these in every process they
// start. A singleton's MPI_Init sets some of them too, so they are read once,
// as the library loads, before any MPI_Init of crown's.
const bool g_launchedAlone = [] {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_STEP_ID"})
    if (std::getenv(variable) != nullptr) return false;
  return true;
}();

}  // namespace

bool launchedAlone() { return g_launchedAlone; }

void prepareSingletonSpawns() {
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", /*overwrite=*/0);
  ::setenv("OMPI_MCA_orte_enable_recovery", "1", /*overwrite=*/0);
}

SpawnCommand sameProgram(const std::string& host) {
  return {thisProgram(), thisArguments(), host};
}

std::string spawnRefusal() {
  if (std::getenv("OMPI_MCA_orte_hnp_uri") != nullptr || launchedAlone()) return "";
  if (std::getenv("SLURM_STEP_ID") != nullptr) {
    return "this job was started by srun, whose PMIx cannot start new processes "
           "(MPI_Comm_spawn); run `mpirun python3 ...` inside the allocation instead, or carry "
           "on with ProcMesh.survivors()";
  }
  return "this job was not started by Open MPI's mpirun, which MPI_Comm_spawn needs to place "
         "new processes; launch with `mpirun -n N python3 ...`, or carry on with "
         "ProcMesh.survivors()";
}

namespace {

// What the service thread and the helper thread that runs the MPI side of
// one join share; it outlives whichever of them lets go of it last.
struct SpawnAttempt {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false;       // the helper is out of MPI for good
  bool abandoned = false;  // the service thread gave up waiting: MPI is not the helper's to use
  std::string stage = "MPI_Comm_spawn";  // the MPI call the helper is in, for the error
  std::vector<JoinAnswer> answers;
  std::exception_ptr error;

  void enter(const char* call) {
    std::lock_guard lock(mutex);
    stage = call;
  }
  bool givenUp() {
    std::lock_guard lock(mutex);
    return abandoned;
  }
};

// On the helper thread: the MPI side of the join, bounded by `deadline`
// wherever MPI lets it be (the wait for the answers); MPI_Comm_spawn and
// MPI_Comm_disconnect are not.
std::vector<JoinAnswer> joinOver(SpawnAttempt& attempt, const std::vector<JoinOffer>& offers,
                                 const SpawnCommand& command,
                                 std::chrono::steady_clock::time_point deadline,
                                 std::chrono::milliseconds timeout) {
  CROWN_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
  MPI_Comm child = MPI_COMM_NULL;
  int count = static_cast<int>(offers.size());
  int code = spawnAll(command, count, child);
  if (code != MPI_SUCCESS && !command.host.empty() && !attempt.givenUp()) {
    // The lost rank's host may be gone with it, or outside what the
    // launcher may place on: anywhere will do.
    log::get().info("{}: cannot start {} on {}; trying any host", starter(offers), whom(offers),
                    command.host);
    SpawnCommand anywhere = command;
    anywhere.host.clear();
    code = spawnAll(anywhere, count, child);
  }
  CROWN_CHECK_MPI(code);
  if (attempt.givenUp()) {
    // Too late: the controller no longer calls MPI for this. The processes
    // wait for an offer that never comes, and exit at their own timeout
    // (receiveOffer).
    throw BootstrapError("MPI_Comm_spawn returned after the controller gave up on it");
  }
  attempt.enter("MPI_Send (the offer)");
  CROWN_CHECK_MPI(MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN));
  for (int i = 0; i < count; ++i) sendBytes(child, i, kOfferTag, wire::toBytes(offers[i]));

  // Each answers once it listens: bounded, since one may die before (a
  // program that fails on this host, say).
  attempt.enter("the wait for the answer");
  std::vector<JoinAnswer> answers;
  for (int i = 0; i < count; ++i) {
    std::uint64_t length = 0;
    MPI_Request request;
    CROWN_CHECK_MPI(MPI_Irecv(&length, 1, MPI_UINT64_T, i, kAnswerTag, child, &request));
    if (!completedBy(request, deadline)) {
      // Not disconnected: MPI_Comm_disconnect would wait for it.
      throw BootstrapError(starter(offers) + ": the process started for rank " +
                           std::to_string(offers[i].rank) + " did not answer within " +
                           std::to_string(timeout.count()) +
                           " ms (CROWN_RESPAWN_TIMEOUT_MS); its own output says why");
    }
    attempt.enter("MPI_Recv (the answer)");
    answers.push_back(wire::fromBytes<JoinAnswer>(receiveRest(child, i, kAnswerTag, length)));
  }
  attempt.enter("MPI_Comm_disconnect");
  CROWN_CHECK_MPI(MPI_Comm_disconnect(&child));
  return answers;
}

}  // namespace

JoinAnswer spawnReplacement(const JoinOffer& offer, const std::string& host,
                            std::chrono::milliseconds timeout) {
  return spawnProcesses({offer}, sameProgram(host), timeout).front();
}

std::vector<JoinAnswer> spawnProcesses(const std::vector<JoinOffer>& offers,
                                       const SpawnCommand& command,
                                       std::chrono::milliseconds timeout) {
  if (offers.empty()) throw ConfigError("spawnProcesses: no process to start");
  using Clock = std::chrono::steady_clock;
  auto started = Clock::now();
  auto deadline = started + timeout;
  auto attempt = std::make_shared<SpawnAttempt>();
  // The helper calls MPI while this (the service) thread waits and calls
  // none: one thread in MPI at a time, as MPI_THREAD_SERIALIZED requires.
  std::thread([attempt, offers, command, deadline, timeout, started] {
    std::vector<JoinAnswer> answers;
    std::exception_ptr error;
    try {
      answers = joinOver(*attempt, offers, command, deadline, timeout);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(attempt->mutex);
    attempt->done = true;
    attempt->answers = std::move(answers);
    attempt->error = error;
    if (attempt->abandoned) {
      log::get().warn("{}: {} for {} returned {} ms after it was given up on", starter(offers),
                      attempt->stage, whom(offers),
                      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)
                          .count());
    }
    attempt->changed.notify_all();
  }).detach();

  std::unique_lock lock(attempt->mutex);
  if (!attempt->changed.wait_until(lock, deadline + kAbandonGrace,
                                   [&] { return attempt->done; })) {
    // Still inside MPI, where Open MPI cannot be interrupted (a process that
    // died before MPI_Init leaves MPI_Comm_spawn waiting for good): the
    // helper is left there, and with it MPI on this process.
    attempt->abandoned = true;
    throw SpawnAbandoned(
        starter(offers) + ": " + processes(offers) + " started for " + whom(offers) +
        " did not join within " + std::to_string(timeout.count()) +
        " ms (CROWN_RESPAWN_TIMEOUT_MS), and Open MPI's " + attempt->stage +
        " has not returned (a process that dies before MPI_Init leaves it waiting for good; its "
        "own output says why it died). crown gave up on it there, on a helper thread, so MPI on "
        "the controller is unusable for the rest of this job: MPI operations with it (tensor "
        "collectives, RDMA windows, further respawns) fail at once; actors, casts and replies "
        "still work",
        "Open MPI's " + attempt->stage + " for " + whom(offers) +
            " (still inside MPI past " + std::to_string(timeout.count()) +
            " ms, CROWN_RESPAWN_TIMEOUT_MS)");
  }
  if (attempt->error) std::rethrow_exception(attempt->error);
  return std::move(attempt->answers);
}

MPI_Comm spawnParent() {
  MPI_Comm parent = MPI_COMM_NULL;
  CROWN_CHECK_MPI(MPI_Comm_get_parent(&parent));
  return parent;
}

JoinOffer receiveOffer(MPI_Comm parent) {
  CROWN_CHECK_MPI(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
  // The controller may have given up on this process (its MPI_Comm_spawn
  // returned past CROWN_RESPAWN_TIMEOUT_MS): then no offer comes, and this
  // process must not wait for ever (SHT-1).
  auto timeout = env::millis("CROWN_RESPAWN_TIMEOUT_MS", std::chrono::milliseconds(60000));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::uint64_t length = 0;
  MPI_Request request;
  CROWN_CHECK_MPI(MPI_Irecv(&length, 1, MPI_UINT64_T, 0, kOfferTag, parent, &request));
  if (!completedBy(request, deadline)) {
    throw BootstrapError("this process was started to join a crown job, but the controller "
                         "sent it no offer within " + std::to_string(timeout.count()) +
                         " ms (CROWN_RESPAWN_TIMEOUT_MS): it gave up on it");
  }
  return wire::fromBytes<JoinOffer>(receiveRest(parent, 0, kOfferTag, length));
}

void sendAnswer(MPI_Comm parent, const JoinAnswer& answer) {
  sendBytes(parent, 0, kAnswerTag, wire::toBytes(answer));
  CROWN_CHECK_MPI(MPI_Comm_disconnect(&parent));
}

}  // namespace crown::detail
