// The owner side of the rdma module (rdma_module.h): registrations, the rdma
// agent, leases, and their ends (drop, a lost reader, a stopped actor, the
// proc's stop).
#include "rdma/rdma_module.h"

#include <cstring>

#include "crown/actor/actor.h"
#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/rdma/module.h"
#include "rdma/messages.h"

namespace crown::rdma {
namespace detail {
namespace {

constexpr std::size_t kRememberedIds = 4096;  // dropped ids whose reason an error can still name

// The rdma agent: answers requests from the module's tables. Its handlers
// never wait (a drop's detach waits for leases in the module, not here), so
// a Release queued behind a request is never held up.
class RdmaAgent : public Actor {
 public:
  explicit RdmaAgent(RdmaModule& module) {
    handle<Acquire>([&module](const Acquire& a) {
      return module.acquire(a.reader, a.id, a.bytes, a.write);
    });
    handle<Release>([&module](const Release& r) { module.release(r.lease); });
    handle<DropRegion>([&module](const DropRegion& d) {
      module.dropLocal(d.id, "dropped");  // the caller does not wait for the detach
    });
    handle<ReadChunk>([&module](const ReadChunk& r) {
      const char* at = module.leased(r.lease, r.offset, r.bytes);
      return std::string(at, r.bytes);
    });
    handle<WriteChunk>([&module](const WriteChunk& w) {
      char* at = module.leased(w.lease, w.offset, w.data.size());
      std::memcpy(at, w.data.data(), w.data.size());
    });
  }
};

}  // namespace

RdmaModule::RdmaModule(std::shared_ptr<Executor> pool) : pool_(std::move(pool)) {}

RdmaModule::~RdmaModule() = default;

RdmaModule& RdmaModule::of(Proc& proc) {
  auto* module = proc.findModule<RdmaModule>();
  if (!module) {
    throw Error("this proc has no rdma module: add crown::rdma::rdmaModule() to "
                "Proc::Options::modules");
  }
  return *module;
}

void RdmaModule::install(Proc& proc, SystemIds& ids) {
  proc_ = &proc;
  try {
    mpi_ = &proc.mpi();
  } catch (const Error&) {
    mpi_ = nullptr;  // a simulated proc: the fallback only
  }
  windowWanted_ = env::integer("CROWN_RDMA_WINDOW", 1, 0, 1) != 0;
  agent_ = ids.claim();
  proc.spawnLocalAt(agent_, std::make_unique<RdmaAgent>(*this), "rdma-agent");
}

MpiService* RdmaModule::windowService() const {
  return mpi_ && windowWanted_ && mpi_->hasWindow() ? mpi_ : nullptr;
}

Buffer RdmaModule::registerMemory(void* data, std::size_t bytes, bool readOnly) {
  if (bytes == 0) throw ConfigError("an RDMA buffer of 0 bytes: there is nothing to register");
  if (data == nullptr) throw ConfigError("an RDMA buffer at a null address");
  {
    std::lock_guard lock(mutex_);
    if (stopped_) throw Error("RDMA: this proc is stopping; it registers no new buffers");
  }
  char* base = static_cast<char*>(data);
  Region region;
  region.base = base;
  region.bytes = bytes;
  region.readOnly = readOnly;
  region.address = reinterpret_cast<std::uint64_t>(base);
  if (const Actor* actor = Actor::current()) region.ownerActor = actor->id().local;
  if (MpiService* mpi = windowService()) {
    // The attach itself runs on the MPI service thread (THR-1), outside
    // mutex_, so the agent goes on answering meanwhile.
    std::lock_guard attachLock(attachMutex_);
    auto key = std::make_pair(base, bytes);
    auto it = attachments_.find(key);
    if (it == attachments_.end()) {
      std::uint64_t address = mpi->windowAttach(base, bytes);
      it = attachments_.emplace(key, std::make_pair(address, 0)).first;
    }
    ++it->second.second;
    region.address = it->second.first;
    region.attached = true;
  }
  std::lock_guard lock(mutex_);
  std::uint64_t id = nextId_++;  // never reused: a stale handle never names a new registration
  Buffer buffer(proc_->rank(), region.ownerActor, region.address, bytes, id, readOnly);
  regions_.emplace(id, std::move(region));
  return buffer;
}

void RdmaModule::remember(std::uint64_t id, std::string why) {
  gone_[id] = std::move(why);
  goneOrder_.push_back(id);
  if (goneOrder_.size() > kRememberedIds) {
    gone_.erase(goneOrder_.front());
    goneOrder_.pop_front();
  }
}

Future<void> RdmaModule::dropLocal(std::uint64_t id, const std::string& why) {
  auto done = std::make_shared<crown::detail::FutureState<void>>();
  std::unique_ptr<Region> retired;
  {
    std::lock_guard lock(mutex_);
    auto it = regions_.find(id);
    if (it == regions_.end()) {
      // Dropped before (drop is idempotent) or never here: nothing to wait for.
      done->setValue({});
      return Future<void>(done);
    }
    Region& region = it->second;
    if (!region.dropping) {
      region.dropping = true;  // from here on, acquire refuses it
      region.dropReason = why;
    }
    region.dropped.push_back(done);
    retired = retireIfIdle(id);
  }
  finishRetired(std::move(retired));
  return Future<void>(done);
}

std::unique_ptr<RdmaModule::Region> RdmaModule::retireIfIdle(std::uint64_t id) {
  auto it = regions_.find(id);
  if (it == regions_.end() || !it->second.dropping || it->second.leases > 0) return nullptr;
  auto region = std::make_unique<Region>(std::move(it->second));
  regions_.erase(it);
  remember(id, region->dropReason);
  return region;
}

void RdmaModule::finishRetired(std::unique_ptr<Region> region) {
  if (!region) return;
  std::exception_ptr error;
  if (region->attached && mpi_) {
    // Only now, with no lease left, may the memory leave the window: no
    // transfer can be touching it.
    try {
      std::lock_guard attachLock(attachMutex_);
      auto it = attachments_.find({region->base, region->bytes});
      if (it != attachments_.end() && --it->second.second == 0) {
        attachments_.erase(it);
        mpi_->windowDetach(region->base);
      }
    } catch (...) {
      error = std::current_exception();
      log::get().warn("RDMA: detaching a dropped buffer failed");
    }
  }
  for (auto& done : region->dropped) {
    if (error) {
      done->setError(error);
    } else {
      done->setValue({});
    }
  }
}

Grant RdmaModule::acquire(Rank reader, std::uint64_t id, std::uint64_t bytes, bool write) {
  std::lock_guard lock(mutex_);
  auto named = [&] { return "RDMA buffer " + std::to_string(id) + " of rank " +
                            std::to_string(proc_->rank()); };
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.dropping) {
    std::string why = it != regions_.end() ? it->second.dropReason : "";
    if (why.empty()) {
      auto gone = gone_.find(id);
      why = gone != gone_.end() ? gone->second : "dropped";
    }
    return Grant{0, named() + " was " + why + ": it can no longer be read or written"};
  }
  Region& region = it->second;
  if (bytes > region.bytes) {
    return Grant{0, named() + " holds " + std::to_string(region.bytes) + " bytes, not " +
                        std::to_string(bytes)};
  }
  if (write && region.readOnly) return Grant{0, named() + " is read-only"};
  std::uint64_t lease = nextLease_++;
  leases_.emplace(lease, Lease{reader, id});
  ++region.leases;
  return Grant{lease, ""};
}

void RdmaModule::release(std::uint64_t lease) {
  std::unique_ptr<Region> retired;
  {
    std::lock_guard lock(mutex_);
    auto it = leases_.find(lease);
    if (it == leases_.end()) return;  // ended already (its reader was lost)
    std::uint64_t id = it->second.region;
    leases_.erase(it);
    if (auto region = regions_.find(id); region != regions_.end()) --region->second.leases;
    retired = retireIfIdle(id);
  }
  finishRetired(std::move(retired));
}

char* RdmaModule::leased(std::uint64_t lease, std::uint64_t offset, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = leases_.find(lease);
  if (it == leases_.end()) throw BufferError("RDMA: lease " + std::to_string(lease) + " has ended");
  Region& region = regions_.at(it->second.region);  // a leased region is never retired
  if (offset > region.bytes || bytes > region.bytes - offset) {
    throw BufferError("RDMA: a chunk past the end of the buffer");
  }
  return region.base + offset;
}

void RdmaModule::peerLost(Rank peer, const std::string&) {
  // The lost reader's transfers end with it: whatever MPI still does for
  // them, no one waits for the bytes.
  std::vector<std::uint64_t> ended;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [lease, entry] : leases_)
      if (entry.reader == peer && peer != proc_->rank()) ended.push_back(lease);
  }
  for (std::uint64_t lease : ended) release(lease);
}

void RdmaModule::actorStopped(std::uint64_t local) {
  std::vector<std::uint64_t> owned;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, region] : regions_)
      if (region.ownerActor == local && !region.dropping) owned.push_back(id);
  }
  for (std::uint64_t id : owned) dropLocal(id, "dropped when its owner actor stopped");
}

void RdmaModule::stop() {
  std::vector<std::uint64_t> all;
  std::vector<std::unique_ptr<Region>> retired;
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    for (auto& [id, region] : regions_) all.push_back(id);
  }
  for (std::uint64_t id : all) dropLocal(id, "dropped when its proc stopped");
  // Leases still held (a reader that never released) end with the proc: its
  // links close, so nothing more reaches the memory through crown, and MPI's
  // window is freed at finalize.
  std::vector<std::uint64_t> leases;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [lease, entry] : leases_) leases.push_back(lease);
  }
  for (std::uint64_t lease : leases) release(lease);
}

Stats RdmaModule::stats() const {
  Stats out;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, region] : regions_)
      if (!region.dropping) ++out.registered;
    out.leases = leases_.size();
  }
  out.attached = mpi_ ? mpi_->windowAttached() : 0;
  out.window = windowService() != nullptr;
  out.fallbackTransfers = fallbackTransfers_;
  return out;
}

}  // namespace detail

Proc::ModuleFactory rdmaModule(std::shared_ptr<Executor> pool) {
  return [pool] { return std::make_unique<detail::RdmaModule>(pool); };
}

Stats stats(Proc& proc) { return detail::RdmaModule::of(proc).stats(); }

}  // namespace crown::rdma
