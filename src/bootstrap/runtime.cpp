#include "crown/bootstrap/runtime.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include "bootstrap/departure.h"
#include "bootstrap/job_ender.h"
#include "bootstrap/lifecycle.h"
#include "bootstrap/mpi_check.h"
#include "bootstrap/mpi_service.h"
#include "bootstrap/respawn.h"
#include "bootstrap/runtime_mpi.h"
#include "crown/actor/agent.h"
#include "crown/actor/mpi_service.h"
#include "crown/bootstrap/malloc_policy.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/debug/server.h"
#include "crown/debug/stacks.h"
#include "crown/mesh/module.h"
#include "crown/rdma/module.h"
#include "crown/supervision/module.h"
#include "crown/transport/transport.h"

namespace crown {
namespace {

using namespace std::chrono_literals;

Runtime* g_runtime = nullptr;
bool g_failureReported = false;  // init printed its failure on this rank

// What every rank tells every other at bootstrap, fixed-size for MPI_Allgather.
struct RankRecord {
  char host[256];
  std::uint32_t addressBytes;
  char address[1024];  // the fabric's opaque address (transport.h)
  char error[512];     // empty when this rank is ready
};

void copyText(char* out, std::size_t size, const std::string& text) {
  std::snprintf(out, size, "%s", text.c_str());
}

// Step 0: every rank keeps a link per peer and accepts connections, so a
// job of a few hundred ranks outgrows the common soft limit of 1024
// descriptors; the hard limit is this process's to take.
void raiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    log::get().debug("raised the open-file limit from {} to {}", before, limit.rlim_cur);
  }
}

// Open MPI's nonblocking allreduce (libnbc), which the MPI service thread
// runs for every CPU reduce (THR-1), picks a binomial tree for 4 ranks at
// every size by default: 0.7-0.8x the blocking MPI_Allreduce from 1 MiB up
// here, where Rabenseifner's reduce-scatter + allgather measured 1.0-1.4x
// of it (bench/README.md). libnbc falls back by itself where Rabenseifner
// does not apply (fewer elements than ranks). The variable is writable at
// run time (MPI_T), so this works when mpi4py began MPI too; a value the
// user chose (mpirun --mca, the environment, a parameter file) is not 0 and
// stays. Another MPI has no such variable: nothing happens.
void tuneNonblockingAllreduce() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return;
  int index = -1;
  MPI_T_cvar_handle handle = nullptr;
  int count = 0;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    int algorithm = -1;
    if (count == 1 && MPI_T_cvar_read(handle, &algorithm) == MPI_SUCCESS && algorithm == 0) {
      int rabenseifner = 3;
      if (MPI_T_cvar_write(handle, &rabenseifner) == MPI_SUCCESS)
        log::get().debug("MPI: libnbc's iallreduce set to Rabenseifner's algorithm");
    }
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
}

// Step 1: MPI, or the MPI mpi4py already initialised (its owner finalises
// it); a communicator of crown's own; rank, size and the ranks of this host.
bool startMpi(int* argc, char*** argv, MPI_Comm& comm, Topology& topo) {
  int initialised = 0;
  CROWN_CHECK_MPI(MPI_Initialized(&initialised));
  int provided = 0;
  if (initialised) {
    CROWN_CHECK_MPI(MPI_Query_thread(&provided));
  } else {
    if (detail::launchedAlone()) detail::prepareSingletonSpawns();  // read by MPI_Init
    CROWN_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    throw BootstrapError("MPI provides thread level " + std::to_string(provided) +
                         " but crown needs MPI_THREAD_SERIALIZED or more (with mpi4py, leave "
                         "mpi4py.rc.thread_level at its default)");
  }
  tuneNonblockingAllreduce();
  CROWN_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  int rank = 0, size = 0;
  CROWN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  CROWN_CHECK_MPI(MPI_Comm_size(comm, &size));
  topo.rank = static_cast<Rank>(rank);
  topo.size = static_cast<Rank>(size);
  log::setRank(topo.rank);

  MPI_Comm local;
  CROWN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  CROWN_CHECK_MPI(MPI_Comm_rank(local, &topo.localRank));
  CROWN_CHECK_MPI(MPI_Comm_size(local, &topo.localSize));
  CROWN_CHECK_MPI(MPI_Comm_free(&local));
  return !initialised;
}

// Step 2: the job secret, made on rank 0 and shared over MPI only (SEC-1).
transport::Secret shareSecret(MPI_Comm comm, Rank rank) {
  transport::Secret secret{};
  if (rank == 0) secret = transport::randomSecret();
  CROWN_CHECK_MPI(MPI_Bcast(secret.data(), static_cast<int>(secret.size()), MPI_BYTE, 0, comm));
  return secret;
}

// Step 2b: rank slots, those of the launch and spares for replacements of
// lost ranks (Runtime::respawn) and for spawned procs (Runtime::spawnProcs),
// as rank 0 reads CROWN_SPARE_RANKS. A process no launcher started has
// nothing but spares to work with: kSingletonSpares by default.
Rank shareSlots(MPI_Comm comm, const Topology& topo) {
  constexpr std::int64_t kSingletonSpares = 1024;  // a slot costs an empty peer entry
  std::uint32_t spares = 0;
  if (topo.rank == 0) {
    std::int64_t byDefault = topo.size == 1 && detail::launchedAlone() ? kSingletonSpares : topo.size;
    spares = static_cast<std::uint32_t>(
        env::integer("CROWN_SPARE_RANKS", byDefault, 0, std::int64_t{1} << 20));
  }
  CROWN_CHECK_MPI(MPI_Bcast(&spares, 1, MPI_UINT32_T, 0, comm));
  return topo.size + spares;
}

// Step 3: listen, and say where (or why not) in this rank's record.
std::unique_ptr<transport::Transport> listen(const Topology& topo, const transport::Secret& secret,
                                             std::shared_ptr<transport::IoPool> pool,
                                             RankRecord& mine) {
  try {
    transport::AsioOptions options;
    options.rank = topo.rank;
    options.size = topo.slots;
    options.host = mine.host;
    options.bindAddress = transport::chooseListenAddress();
    options.secret = secret;
    options.limits = wire::FrameLimits::fromEnv();
    options.connectTimeout = env::millis("CROWN_CONNECT_TIMEOUT_MS", 10s);
    options.authTimeout = env::millis("CROWN_AUTH_TIMEOUT_MS", 5s);
    options.heartbeatInterval =
        env::millis("CROWN_HEARTBEAT_INTERVAL_MS", 1s, std::chrono::milliseconds(0));
    options.heartbeatMisses = static_cast<int>(env::integer("CROWN_HEARTBEAT_MISSES", 5, 1, 1000));
    std::string sameHost = env::choice("CROWN_SAME_HOST_TRANSPORT", "shm", {"shm", "unix", "tcp"});
    options.listenLocal = sameHost != "tcp";
    options.sharedMemory = sameHost == "shm";
    options.security = transport::fabricSecurityFromEnv();
    options.pool = std::move(pool);
    auto fabric = transport::makeAsioTransport(options);
    std::string address = fabric->address();
    if (address.size() > sizeof mine.address) {
      throw BootstrapError("the fabric's address takes " + std::to_string(address.size()) +
                           " bytes, over the " + std::to_string(sizeof mine.address) +
                           " that bootstrap exchanges");
    }
    std::memcpy(mine.address, address.data(), address.size());
    mine.addressBytes = static_cast<std::uint32_t>(address.size());
    return fabric;
  } catch (const std::exception& e) {
    copyText(mine.error, sizeof mine.error, e.what());
    return nullptr;
  }
}

std::string processorName() {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int initialised = 0;
  CROWN_CHECK_MPI(MPI_Initialized(&initialised));  // callable before MPI_Init
  if (!initialised) {  // an attached client, which starts no MPI: the name Open MPI gives
    ::gethostname(host, sizeof host - 1);
    return host;
  }
  int length = 0;
  CROWN_CHECK_MPI(MPI_Get_processor_name(host, &length));
  return host;
}

// hostIndexOf and hostCount from hostNames, and the index of `mine` (which
// a replacement's host may add).
void indexHosts(Topology& topo, const std::string& mine) {
  std::map<std::string, int> hostIndex;
  topo.hostIndexOf.clear();
  for (const std::string& host : topo.hostNames) {
    auto [it, added] = hostIndex.emplace(host, static_cast<int>(hostIndex.size()));
    topo.hostIndexOf.push_back(it->second);
  }
  topo.hostCount = static_cast<int>(hostIndex.size());
  auto it = hostIndex.find(mine);
  topo.hostIndex = it != hostIndex.end() ? it->second : topo.hostCount;
}

// Step 4 (after MPI_Allgather): host names and indices into the topology,
// every rank's address, and the failures of those that could not listen.
std::vector<std::string> readRecords(const std::vector<RankRecord>& records, Topology& topo,
                                     std::string& failures) {
  std::vector<std::string> peers;
  for (Rank r = 0; r < topo.size; ++r) {
    const RankRecord& record = records[r];
    if (record.error[0] != '\0') {
      failures += "\n  rank " + std::to_string(r) + " (" + record.host + "): " + record.error;
    }
    topo.hostNames.emplace_back(record.host);
    peers.emplace_back(record.address,
                       std::min<std::size_t>(record.addressBytes, sizeof record.address));
  }
  indexHosts(topo, topo.hostNames[topo.rank]);
  peers.resize(topo.slots);  // spare slots: vacant until a replacement joins
  return peers;
}

// Step 5, on rank 0: the controller reaches every rank over the fabric, so a
// peer that cannot be connected fails the bootstrap here rather than the
// first call. Returns what failed ("" when every rank answered).
std::string pingEveryRank(Proc& proc, const Topology& topo) {
  auto timeout = env::millis("CROWN_CONNECT_TIMEOUT_MS", 10s);
  std::vector<Future<Rank>> pings;
  for (Rank r = 1; r < topo.size; ++r)
    pings.push_back(proc.request<Rank>({r, kAgentLocalId}, agent::Ping{}));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string verdict;
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
  return verdict;
}

// A joining process's steps 2 to 4 (respawn.h): an offer in place of the
// collective exchange (a replacement's or spawned proc's from its MPI
// parent, an attached client's from the served controller); it listens in
// its slot. Returns the offer with this rank's own host and address filled
// in; `error` says why it could not listen.
detail::JoinOffer takeOffer(detail::JoinOffer offer, Topology& topo,
                            const std::shared_ptr<transport::IoPool>& pool,
                            std::unique_ptr<transport::Transport>& fabric, std::string& error) {
  transport::Secret secret{};
  if (offer.rank >= offer.slots || offer.launched > offer.slots ||
      offer.hosts.size() != offer.slots || offer.addresses.size() != offer.slots ||
      offer.secret.size() != secret.size()) {
    throw ProtocolError("the controller's offer to join the job is malformed");
  }
  std::memcpy(secret.data(), offer.secret.data(), secret.size());
  topo.rank = offer.rank;
  topo.size = offer.launched;
  topo.slots = offer.slots;
  log::setRank(topo.rank);
  topo.hostNames.assign(offer.hosts.begin(), offer.hosts.begin() + offer.launched);
  RankRecord mine{};
  copyText(mine.host, sizeof mine.host, processorName());
  indexHosts(topo, mine.host);
  fabric = listen(topo, secret, pool, mine);
  offer.hosts[topo.rank] = mine.host;
  offer.addresses[topo.rank].assign(mine.address, mine.addressBytes);
  error = mine.error;
  return offer;
}

void broadcastText(std::string& text, MPI_Comm comm) {
  int length = static_cast<int>(text.size());
  CROWN_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, 0, comm));
  text.resize(static_cast<std::size_t>(length));
  CROWN_CHECK_MPI(MPI_Bcast(text.data(), length, MPI_CHAR, 0, comm));
}

}  // namespace

Runtime::Runtime() : mpi_(std::make_unique<Mpi>()) {}

Runtime::~Runtime() {
  if (g_runtime == this) g_runtime = nullptr;
}

Runtime& Runtime::current() {
  if (g_runtime == nullptr)
    throw Error("crown is not initialised in this process: call crown::run first");
  return *g_runtime;
}

void Runtime::onMpiThread(std::function<void()> fn) { mpi_->service->call(std::move(fn)); }

bool Runtime::failureReported() { return g_failureReported; }

// Every rank says why before any leaves: finish() ends in MPI_Finalize,
// which waits for every rank, and mpirun ends the job at the first rank that
// exits non-zero, so a message printed after it might never appear.
void Runtime::failBootstrap(Runtime& self, const std::string& why) {
  std::string message = "crown bootstrap failed:" + why;
  std::cerr << message << std::endl;
  g_failureReported = true;
  self.finish(1);
  throw BootstrapError(message);
}

Runtime& Runtime::init(int* argc, char*** argv) { return start(argc, argv, nullptr, nullptr); }

Runtime& Runtime::start(int* argc, char*** argv, const detail::JoinOffer* attachOffer,
                        detail::JoinAnswer* answer) {
  CROWN_CHECK(g_runtime == nullptr, "crown::Runtime::init called twice");
  raiseOpenFileLimit();
  keepMallocMemory();  // before crown's threads start: they share the one arena
  static Runtime self;
  Topology& topo = self.topology_;
  self.pool_ = std::make_shared<transport::IoPool>();
  const auto& pool = self.pool_;
  std::unique_ptr<transport::Transport> fabric;
  std::vector<RankRecord> records;
  std::optional<detail::JoinOffer> offer;  // this process joins a running job
  std::string joinError;
  self.onMpiThread([&] {
    if (attachOffer) {
      // A client of a served job is outside the job's MPI world (its
      // buffers move over the fabric), so it starts no MPI at all: a
      // singleton's MPI_Init would cost each attach half a second.
      offer = takeOffer(*attachOffer, topo, pool, fabric, joinError);
      *answer = {offer->hosts[topo.rank], offer->addresses[topo.rank], joinError};
      return;
    }
    self.mpi_->ownsMpi = startMpi(argc, argv, self.mpi_->comm, topo);
    if (MPI_Comm parent = detail::spawnParent(); parent != MPI_COMM_NULL) {
      offer = takeOffer(detail::receiveOffer(parent), topo, pool, fabric, joinError);
      detail::sendAnswer(parent, {offer->hosts[topo.rank], offer->addresses[topo.rank], joinError});
      return;
    }
    self.secret_ = shareSecret(self.mpi_->comm, topo.rank);
    topo.slots = shareSlots(self.mpi_->comm, topo);
    RankRecord mine{};
    copyText(mine.host, sizeof mine.host, processorName());
    fabric = listen(topo, self.secret_, pool, mine);
    records.resize(topo.size);
    CROWN_CHECK_MPI(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, records.data(), sizeof mine,
                                  MPI_BYTE, self.mpi_->comm));
    self.mpi_->trace = detail::setUpTrace(self.mpi_->comm, static_cast<int>(topo.rank),
                                          static_cast<int>(topo.size));
  });
  if (offer) {
    self.attached_ = attachOffer != nullptr;
    if (self.attached_ && !joinError.empty()) {  // the client's own failure: its process lives on
      throw BootstrapError("cannot attach: this process cannot listen for the job's ranks: " +
                           joinError);
    }
    return self.joinAsReplacement(*offer, std::move(fabric), joinError);
  }

  std::string failures;
  std::vector<std::string> peers = readRecords(records, topo, failures);
  if (!failures.empty()) failBootstrap(self, failures);
  self.addresses_ = transport::decodeAddresses(peers[topo.rank]);
  // From here on MPI is reached through the service's operations too.
  self.mpi_->service->adoptWorld(self.mpi_->comm, topo.hostNames);
  // The RDMA window, collectively, while every rank is still in step.
  self.mpi_->service->openWindow(env::integer("CROWN_RDMA_WINDOW", 1, 0, 1) != 0);
  if (topo.rank == 0) {  // for the offers of respawn
    self.slotAddresses_ = peers;
    self.nextSlot_ = topo.size;
  }
  self.startProc(std::make_shared<const std::vector<std::string>>(topo.hostNames), {},
                 std::move(fabric), std::move(peers));

  std::string verdict = topo.rank == 0 ? pingEveryRank(*self.proc_, topo) : "";
  self.onMpiThread([&] { broadcastText(verdict, self.mpi_->comm); });
  if (!verdict.empty()) failBootstrap(self, verdict);
  if (topo.rank == 0 && env::choice("CROWN_DEBUG_SERVER", "on", {"on", "off"}) == "on") {
    try {
      self.debugServer_ = debug::DebugServer::start(*self.proc_);
    } catch (const std::exception& e) {  // the job runs without it
      log::get().warn("no debug server (crown stacks will not reach this job): {}", e.what());
    }
  }
  if (topo.rank == 0) detail::installJobEnder(self);  // an unhandled fault ends the job
  std::string listening;
  for (const auto& [backend, address] : self.addresses_) listening += " " + backend;
  log::get().debug("bootstrap done: rank {} of {} ({} slots), host {} ({} of {}), listening on{}",
                   topo.rank, topo.size, topo.slots, topo.hostNames[topo.rank], topo.hostIndex,
                   topo.hostCount, listening);
  return self;
}

// The modules of every rank's Proc, in the same order on every rank.
void Runtime::startProc(std::shared_ptr<const std::vector<std::string>> hosts,
                        std::vector<Rank> lostBefore, std::unique_ptr<transport::Transport> fabric,
                        std::vector<std::string> peers) {
  Proc::Options procOptions{
      topology_.rank,
      topology_.slots,
      std::move(hosts),
      pool_,
      /*stopsPool=*/true,
      {detail::Lifecycle::factory(mpi_->service), mesh::meshModule(), rdma::rdmaModule(pool_),
       supervision::supervisionModule(), debug::debugModule()},
      mpi_->service,
      /*launched=*/topology_.size,
      std::move(lostBefore)};
  transport::Transport& links = *fabric;  // the Proc's from here on, which lives as long as this
  proc_ = std::make_unique<Proc>(procOptions, std::move(fabric), std::move(peers));
  g_runtime = this;
  auto& lifecycle = detail::Lifecycle::of(*proc_);
  detail::installLastWords(links, [&lifecycle] { return lifecycle.shuttingDown(); });
}

bool Runtime::ownsMpi() const { return mpi_->ownsMpi; }

bool Runtime::shuttingDown() const { return proc_ && detail::Lifecycle::of(*proc_).shuttingDown(); }

}  // namespace crown
