#include "bootstrap/respawn.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "bootstrap/mpi_check.h"
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

void sendBytes(MPI_Comm comm, int tag, const wire::Bytes& bytes) {
  std::uint64_t length = bytes.size();
  CROWN_CHECK_MPI(MPI_Send(&length, 1, MPI_UINT64_T, 0, tag, comm));
  CROWN_CHECK_MPI(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, tag, comm));
}

wire::Bytes receiveRest(MPI_Comm comm, int tag, std::uint64_t length) {
  wire::Bytes bytes(static_cast<std::size_t>(length), '\0');
  CROWN_CHECK_MPI(MPI_Recv(bytes.data(), static_cast<int>(length), MPI_BYTE, 0, tag, comm,
                           MPI_STATUS_IGNORE));
  return bytes;
}

int spawnOne(const std::string& program, std::vector<std::string>& arguments,
             const std::string& host, MPI_Comm& child) {
  std::vector<char*> argv;
  for (auto& word : arguments) argv.push_back(word.data());
  argv.push_back(nullptr);
  char cwd[4096] = {};
  MPI_Info info;
  CROWN_CHECK_MPI(MPI_Info_create(&info));
  if (::getcwd(cwd, sizeof cwd) != nullptr) MPI_Info_set(info, "wdir", cwd);
  if (!host.empty()) MPI_Info_set(info, "host", host.c_str());
  int spawnError = MPI_SUCCESS;
  int code = MPI_Comm_spawn(program.c_str(), argv.data(), 1, info, 0, MPI_COMM_SELF, &child,
                            &spawnError);
  MPI_Info_free(&info);
  return code != MPI_SUCCESS ? code : spawnError;
}

}  // namespace

std::string spawnRefusal() {
  if (std::getenv("OMPI_MCA_orte_hnp_uri") != nullptr) return "";
  if (std::getenv("SLURM_STEP_ID") != nullptr) {
    return "this job was started by srun, whose PMIx cannot start new processes "
           "(MPI_Comm_spawn); run `mpirun python3 ...` inside the allocation instead, or carry "
           "on with ProcMesh.survivors()";
  }
  return "this job was not started by Open MPI's mpirun, which MPI_Comm_spawn needs to place "
         "new processes; launch with `mpirun -n N python3 ...`, or carry on with "
         "ProcMesh.survivors()";
}

JoinAnswer spawnReplacement(const JoinOffer& offer, const std::string& host,
                            std::chrono::milliseconds timeout) {
  std::string program = thisProgram();
  std::vector<std::string> arguments = thisArguments();
  CROWN_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
  MPI_Comm child = MPI_COMM_NULL;
  int code = spawnOne(program, arguments, host, child);
  if (code != MPI_SUCCESS && !host.empty()) {
    // The lost rank's host may be gone with it, or outside what the
    // launcher may place on: anywhere will do.
    log::get().info("respawn: cannot start rank {} on {}; trying any host", offer.rank, host);
    code = spawnOne(program, arguments, "", child);
  }
  CROWN_CHECK_MPI(code);
  CROWN_CHECK_MPI(MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN));
  sendBytes(child, kOfferTag, wire::toBytes(offer));

  // The replacement answers once it listens: bounded, since it may die
  // before (a program that fails on this host, say).
  std::uint64_t length = 0;
  MPI_Request request;
  CROWN_CHECK_MPI(MPI_Irecv(&length, 1, MPI_UINT64_T, 0, kAnswerTag, child, &request));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int done = 0;
  while (!done) {
    CROWN_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      // Not disconnected: MPI_Comm_disconnect would wait for it.
      throw BootstrapError("respawn: the process started for rank " + std::to_string(offer.rank) +
                           " did not answer within " + std::to_string(timeout.count()) +
                           " ms (CROWN_RESPAWN_TIMEOUT_MS); its own output says why");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto answer = wire::fromBytes<JoinAnswer>(receiveRest(child, kAnswerTag, length));
  CROWN_CHECK_MPI(MPI_Comm_disconnect(&child));
  return answer;
}

MPI_Comm spawnParent() {
  MPI_Comm parent = MPI_COMM_NULL;
  CROWN_CHECK_MPI(MPI_Comm_get_parent(&parent));
  return parent;
}

JoinOffer receiveOffer(MPI_Comm parent) {
  CROWN_CHECK_MPI(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
  std::uint64_t length = 0;
  CROWN_CHECK_MPI(MPI_Recv(&length, 1, MPI_UINT64_T, 0, kOfferTag, parent, MPI_STATUS_IGNORE));
  return wire::fromBytes<JoinOffer>(receiveRest(parent, kOfferTag, length));
}

void sendAnswer(MPI_Comm parent, const JoinAnswer& answer) {
  sendBytes(parent, kAnswerTag, wire::toBytes(answer));
  CROWN_CHECK_MPI(MPI_Comm_disconnect(&parent));
}

}  // namespace crown::detail
