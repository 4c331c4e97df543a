#include "crown/bootstrap/runtime.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "bootstrap/mpi_service.h"
#include "crown/actor/agent.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/mesh/cast.h"
#include "crown/transport/transport.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

Runtime* g_runtime = nullptr;

void checkMpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw BootstrapError(std::string(call) + " failed: " + text);
}

#define CROWN_CHECK_MPI(call) checkMpi((call), #call)

// What every rank tells every other at bootstrap, fixed-size for MPI_Allgather.
struct RankRecord {
  char host[256];
  char address[64];
  std::uint16_t port;
  char local[108];  // abstract Unix socket name; empty when not listening on one
  char error[512];  // empty when this rank is ready
};

void copyText(char* out, std::size_t size, const std::string& text) {
  std::snprintf(out, size, "%s", text.c_str());
}

}  // namespace

struct Runtime::Mpi {
  detail::MpiService service;
  MPI_Comm comm = MPI_COMM_NULL;
  bool ownsMpi = false;  // crown initialised MPI, so crown finalises it
};

Runtime::Runtime() : mpi_(std::make_unique<Mpi>()) {}

Runtime::~Runtime() {
  if (g_runtime == this) g_runtime = nullptr;
}

Runtime& Runtime::current() {
  if (g_runtime == nullptr)
    throw Error("crown is not initialised in this process: call crown::run first");
  return *g_runtime;
}

void Runtime::onMpiThread(std::function<void()> fn) { mpi_->service.call(std::move(fn)); }

Runtime& Runtime::init(int* argc, char*** argv) {
  CROWN_CHECK(g_runtime == nullptr, "crown::Runtime::init called twice");
  static Runtime runtime;
  Runtime& self = runtime;
  Topology& topo = self.topology_;
  transport::Secret secret{};
  std::unique_ptr<transport::Transport> fabric;
  auto pool = std::make_shared<transport::IoPool>();
  std::vector<RankRecord> records;

  self.onMpiThread([&] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    int provided = 0;
    if (initialised) {
      MPI_Query_thread(&provided);  // adopted (mpi4py first): its owner finalises
    } else {
      CROWN_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
      self.mpi_->ownsMpi = true;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      throw BootstrapError("MPI provides thread level " + std::to_string(provided) +
                           " but crown needs MPI_THREAD_SERIALIZED or more (with mpi4py, leave "
                           "mpi4py.rc.thread_level at its default)");
    }
    CROWN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &self.mpi_->comm));
    MPI_Comm comm = self.mpi_->comm;
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    topo.rank = static_cast<Rank>(rank);
    topo.size = static_cast<Rank>(size);
    log::setRank(topo.rank);

    MPI_Comm local;
    CROWN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    MPI_Comm_rank(local, &topo.localRank);
    MPI_Comm_size(local, &topo.localSize);
    MPI_Comm_free(&local);

    // Job secret: made on rank 0, shared over MPI only (SEC-1).
    if (rank == 0) secret = transport::randomSecret();
    CROWN_CHECK_MPI(MPI_Bcast(secret.data(), static_cast<int>(secret.size()), MPI_BYTE, 0, comm));

    RankRecord mine{};
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int hostLength = 0;
    MPI_Get_processor_name(host, &hostLength);
    copyText(mine.host, sizeof mine.host, host);
    try {
      transport::AsioOptions options;
      options.rank = topo.rank;
      options.size = topo.size;
      options.bindAddress = transport::chooseListenAddress();
      options.secret = secret;
      options.limits = wire::FrameLimits::fromEnv();
      options.connectTimeout = env::millis("CROWN_CONNECT_TIMEOUT_MS", 10s);
      options.authTimeout = env::millis("CROWN_AUTH_TIMEOUT_MS", 5s);
      options.heartbeatInterval =
          env::millis("CROWN_HEARTBEAT_INTERVAL_MS", 1s, std::chrono::milliseconds(0));
      options.heartbeatMisses = static_cast<int>(env::integer("CROWN_HEARTBEAT_MISSES", 5, 1, 1000));
      options.listenLocal = env::get("CROWN_SAME_HOST_TRANSPORT").value_or("unix") != "tcp";
      options.pool = pool;
      fabric = transport::makeAsioTransport(options);
      copyText(mine.address, sizeof mine.address, fabric->localEndpoint().host);
      mine.port = fabric->localEndpoint().port;
      copyText(mine.local, sizeof mine.local, fabric->localEndpoint().local);
    } catch (const std::exception& e) {
      copyText(mine.error, sizeof mine.error, e.what());
    }
    records.resize(topo.size);
    CROWN_CHECK_MPI(
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, records.data(), sizeof mine, MPI_BYTE, comm));
  });

  std::string failures;
  std::map<std::string, int> hostIndex;
  std::vector<transport::Endpoint> peers;
  for (Rank r = 0; r < topo.size; ++r) {
    const RankRecord& record = records[r];
    if (record.error[0] != '\0') {
      failures += "\n  rank " + std::to_string(r) + " (" + record.host + "): " + record.error;
    }
    topo.hostNames.emplace_back(record.host);
    auto [it, added] = hostIndex.emplace(record.host, static_cast<int>(hostIndex.size()));
    topo.hostIndexOf.push_back(it->second);
    peers.push_back({record.address, record.port, record.local});
  }
  // Unix sockets only reach ranks on this host (its network namespace).
  for (Rank r = 0; r < topo.size; ++r) {
    if (topo.hostNames[r] != topo.hostNames[topo.rank]) peers[r].local.clear();
  }
  topo.hostIndex = topo.hostIndexOf[topo.rank];
  topo.hostCount = static_cast<int>(hostIndex.size());
  if (!failures.empty()) {
    self.finish(1);
    throw BootstrapError("crown bootstrap failed:" + failures);
  }
  self.endpoint_ = peers[topo.rank];

  Proc::Options procOptions{topo.rank, topo.size,
                            std::make_shared<const std::vector<std::string>>(topo.hostNames), pool,
                            /*stopsPool=*/true,
                            mesh::installAgents};
  self.proc_ = std::make_unique<Proc>(procOptions, std::move(fabric), std::move(peers));
  g_runtime = &self;

  // Fabric check: the controller reaches every rank over TCP, so a peer that
  // cannot be connected fails the bootstrap here rather than the first call.
  std::string verdict;
  if (topo.rank == 0) {
    auto timeout = env::millis("CROWN_CONNECT_TIMEOUT_MS", 10s);
    std::vector<Future<Rank>> pings;
    for (Rank r = 1; r < topo.size; ++r)
      pings.push_back(self.proc_->request<Rank>({r, kAgentLocalId}, agent::Ping{}));
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (Rank r = 1; r < topo.size; ++r) {
      try {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pings[r - 1].get(std::max(left, std::chrono::milliseconds(1)));
      } catch (const std::exception& e) {
        verdict += "\n  rank " + std::to_string(r) + " (" + topo.hostNames[r] +
                   ") is not reachable over TCP from rank 0: " + e.what();
      }
    }
  }
  self.onMpiThread([&] {
    int length = static_cast<int>(verdict.size());
    CROWN_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, self.mpi_->comm));
    verdict.resize(static_cast<std::size_t>(length));
    CROWN_CHECK_MPI(MPI_Bcast(verdict.data(), length, MPI_CHAR, 0, self.mpi_->comm));
  });
  if (!verdict.empty()) {
    self.finish(1);
    throw BootstrapError("crown bootstrap failed:" + verdict);
  }
  log::get().debug("bootstrap done: rank {} of {}, host {} ({} of {}), listening on {}:{} @{}",
                   topo.rank, topo.size, topo.hostNames[topo.rank], topo.hostIndex, topo.hostCount,
                   self.endpoint_.host, self.endpoint_.port, self.endpoint_.local);
  return self;
}

bool Runtime::ownsMpi() const { return mpi_->ownsMpi; }

void Runtime::finish(int code) {
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
    proc_->requestShutdown(code);  // from here on, links closing are expected
    peerLost = proc_->ranksLost();
    // Every rank marks itself shutting down before any closes its links, so
    // no survivor takes a neighbour's orderly exit for a crash.
    if (!peerLost) onMpiThread([this] { MPI_Barrier(mpi_->comm); });
    proc_->stop(env::millis("CROWN_FLUSH_TIMEOUT_MS", 5s));
  }
  std::fflush(stdout);
  if (peerLost && mpi_->ownsMpi) {
    // MPI_Finalize synchronises with every rank, and a lost one never comes.
    log::get().info("a rank was lost: exiting without MPI_Finalize");
    std::fflush(stderr);
    ::_exit(code);
  }
  onMpiThread([this] {
    if (mpi_->comm != MPI_COMM_NULL) MPI_Comm_free(&mpi_->comm);
    if (mpi_->ownsMpi) MPI_Finalize();  // an adopted MPI is finalised by its owner
  });
}

}  // namespace crown
