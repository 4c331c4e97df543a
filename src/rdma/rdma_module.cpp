// The owner side of the rdma module (rdma_module.h): registrations, the rdma
// agent, and the ends of leases (drop, a lost reader, a stopped actor, the
// proc's stop). Granting and releasing leases: rdma_leases.cpp.
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

}  // namespace

RdmaModule::RdmaModule(std::shared_ptr<Executor> pool)
    : pool_(std::move(pool)), deadlines_(std::make_shared<DeadlineQueue>(pool_)) {}

RdmaModule::~RdmaModule() = default;

RdmaModule& RdmaModule::of(Proc& proc) {
  auto* module = proc.findModule<RdmaModule>();
  if (!module) {
    throw Error(
        "this proc has no rdma module: add crown::rdma::rdmaModule() to "
        "Proc::Options::modules");
  }
  return *module;
}

void RdmaModule::install(Proc& proc, SystemIds& ids) {
  proc_ = &proc;
  device_ = deviceMemory();
  try {
    mpi_ = &proc.mpi();
  } catch (const Error&) {
    mpi_ = nullptr;  // a simulated proc: the fallback only
  }
  windowWanted_ = env::integer("CROWN_RDMA_WINDOW", 1, 0, 1) != 0;
  singleCopy_ = env::choice("CROWN_RDMA_SAME_HOST", "cma", {"cma", "mpi"}) == "cma";
  agent_ = ids.claim();
  // A raw agent, not an actor: its messages are neither numbered (ORD-1)
  // nor counted against a mailbox (FLO-1), so a reader's Release, sent from
  // whichever pool thread saw its transfer end, never waits behind anything,
  // and the agent answers on the thread that read the request. Its handling
  // never blocks: a detach, which waits for the MPI service thread, is
  // posted to the pool (finishRetired).
  proc.setRawAgent(agent_, [this](wire::Envelope&& envelope, wire::Bytes&& bytes) {
    onMessage(std::move(envelope), std::move(bytes));
  });
}

void RdmaModule::onMessage(wire::Envelope envelope, wire::Bytes bytes) {
  const std::string& type = envelope.type;
  bool request = envelope.kind == wire::MessageKind::kRequest;
  try {
    if (type == wire::messageName<Acquire>()) {
      auto a = wire::fromBytes<Acquire>(bytes);
      replyWith(*proc_, envelope, acquire(a.reader, a.id, a.address, a.bytes, a.write));
    } else if (type == wire::messageName<Release>()) {
      release(wire::fromBytes<Release>(bytes).lease);
    } else if (type == wire::messageName<Revoke>()) {
      revoked(envelope.sender.rank, wire::fromBytes<Revoke>(bytes).lease);
    } else if (type == wire::messageName<DropRegion>()) {
      // The reply waits for the drop to finish (the memory detached and let
      // go of), as a drop on this proc does; this thread never waits for it.
      Future<void> dropped = dropLocal(wire::fromBytes<DropRegion>(bytes).id, "dropped");
      if (request) {
        dropped.then([this, envelope](Future<void> done) {
          try {
            done.get();
            replyWith(*proc_, envelope, crown::detail::Unit{});
          } catch (...) {
            try {
              proc_->replyFailure(envelope, std::current_exception());
            } catch (const std::exception& e) {  // this proc stops: the dropper hears of it
              log::get().debug("RDMA: answering a drop: {}", e.what());
            }
          }
        });
      }
    } else if (type == wire::messageName<Stage>()) {
      stage(envelope, wire::fromBytes<Stage>(bytes));
    } else if (type == wire::messageName<Unstage>()) {
      unstage(envelope, wire::fromBytes<Unstage>(bytes));
    } else if (type == wire::messageName<ReadChunk>()) {
      auto r = wire::fromBytes<ReadChunk>(bytes);
      const char* at = leased(r.lease, r.offset, r.bytes);
      std::string chunk(r.bytes, '\0');
      copyMemory(chunk.data(), at, r.bytes);  // the buffer may be device memory
      replyWith(*proc_, envelope, chunk);
    } else if (type == wire::messageName<WriteChunk>()) {
      auto w = wire::fromBytes<WriteChunk>(bytes);
      char* at = leased(w.lease, w.offset, w.data.size());
      copyMemory(at, w.data.data(), w.data.size());
      replyWith(*proc_, envelope, crown::detail::Unit{});
    } else {
      throw ProtocolError("the rdma agent takes no " + type);
    }
  } catch (...) {
    if (request) return proc_->replyFailure(envelope, std::current_exception());
    try {
      throw;
    } catch (const std::exception& e) {
      log::get().warn("RDMA agent: a {} failed: {}", type, e.what());
    }
  }
}

MpiService* RdmaModule::windowService() const {
  return mpi_ && windowWanted_ && mpi_->hasWindow() ? mpi_ : nullptr;
}

Buffer RdmaModule::registerMemory(void* data, std::size_t bytes, bool readOnly,
                                  std::shared_ptr<void> keep) {
  if (bytes == 0) throw ConfigError("an RDMA buffer of 0 bytes: there is nothing to register");
  if (data == nullptr) throw ConfigError("an RDMA buffer at a null address");
  {
    std::lock_guard lock(mutex_);
    if (stopped_) throw Error("RDMA: this proc is stopping; it registers no new buffers");
  }
  char* base = static_cast<char*>(data);
  Region region;
  region.keep = std::move(keep);
  region.base = base;
  region.bytes = bytes;
  region.readOnly = readOnly;
  region.address = reinterpret_cast<std::uint64_t>(base);
  // The actor this code runs for owns it: a handler's, or the one a front
  // end's thread acts for (a Python actor's loop thread, its __init__ under
  // the mesh agent); else a system agent whose handler runs; else none.
  if (auto acting = actingActor(); acting && acting->rank == proc_->rank()) {
    region.ownerActor = acting->local;
  } else if (const Actor* actor = Actor::current()) {
    region.ownerActor = actor->id().local;
  }
  region.exposedOnHost = !(device_ && device_->isDevice(base));
  if (MpiService* mpi = windowService()) {
    // Device memory that MPI cannot move itself is exposed through a
    // pinned mirror (staging.cpp); the window holds the mirror.
    char* exposed = base;
    if (!region.exposedOnHost && !mpi->cudaAware()) {
      region.staging = static_cast<char*>(device_->allocateStaging(bytes));
      region.exposedOnHost = true;
      exposed = region.staging;
    }
    // The attach itself runs on the MPI service thread (THR-1), outside
    // mutex_, so the agent goes on answering meanwhile.
    std::lock_guard attachLock(attachMutex_);
    auto key = std::make_pair(exposed, bytes);
    auto it = attachments_.find(key);
    if (it == attachments_.end()) {
      std::uint64_t address = 0;
      try {
        address = mpi->windowAttach(exposed, bytes);
      } catch (const std::exception& e) {
        if (region.staging) device_->freeStaging(region.staging, bytes);
        // Most often MPI's bound on the regions of one window (Open MPI:
        // osc_rdma_max_attach, 64 by default), reached by buffers never dropped.
        throw Error(std::string(e.what()) + " (this proc has " +
                    std::to_string(attachments_.size()) +
                    " regions in the MPI window: drop() the RDMA buffers no longer read, or "
                    "raise MPI's bound, e.g. --mca osc_rdma_max_attach 1024 for Open MPI)");
      }
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
  std::vector<std::pair<Rank, std::uint64_t>> revokes;  // (reader, lease)
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
      // Readers hold their leases for later transfers: ask for them back.
      for (const auto& [lease, entry] : leases_)
        if (entry.region == id) revokes.emplace_back(entry.reader, lease);
    }
    region.dropped.push_back(done);
    retired = retireIfIdle(id);
  }
  for (const auto& [reader, lease] : revokes) sendRevoke(reader, lease);
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
  if (((region->attached && mpi_) || region->keep) && !detaching_ && !stopping_) {
    // Off the agent's thread: the detach waits for the MPI service thread,
    // and letting go of `keep` may wait for a front end's lock (Python's GIL).
    // (Once the proc stops, in place: the pool may not run it any more.)
    std::shared_ptr<Region> later(std::move(region));
    return pool_->post([this, later] {
      detaching_ = true;  // this pool thread may detach in place
      finishRetired(std::make_unique<Region>(std::move(*later)));
      detaching_ = false;
    });
  }
  std::exception_ptr error;
  if (region->attached && mpi_) {
    // Only now, with no lease left, may the memory leave the window: no
    // transfer can be touching it.
    try {
      std::lock_guard attachLock(attachMutex_);
      char* exposed = region->staging ? region->staging : region->base;
      auto it = attachments_.find({exposed, region->bytes});
      if (it != attachments_.end() && --it->second.second == 0) {
        attachments_.erase(it);
        mpi_->windowDetach(exposed);
      }
    } catch (...) {
      error = std::current_exception();
      log::get().warn("RDMA: detaching a dropped buffer failed");
    }
  }
  // The mirror goes after its detach: nothing can read it any more.
  if (region->staging && !error) device_->freeStaging(region->staging, region->bytes);
  // And the memory itself may go now, before the drop is said to be done.
  region->keep.reset();
  for (auto& done : region->dropped) {
    if (error) {
      done->setError(error);
    } else {
      done->setValue({});
    }
  }
}

void RdmaModule::peerLost(Rank peer, const std::string&) {
  // As a reader: the leases held on the lost owner's buffers are void (its
  // transfers fail with ProcessLost in the MPI service).
  {
    std::lock_guard lock(heldMutex_);
    std::erase_if(held_, [peer](const auto& entry) { return entry.first.first == peer; });
    std::erase_if(cached_, [peer](const auto& entry) { return std::get<0>(entry.first) == peer; });
  }
  // As an owner: the lost reader's transfers end with it: whatever MPI still
  // does for them, no one waits for the bytes.
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
  stopping_ = true;
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
  // As a reader: give back what this proc holds.
  std::vector<LeaseKey> held;
  {
    std::lock_guard lock(heldMutex_);
    for (const auto& [key, entry] : held_) held.push_back(key);
    held_.clear();
    cached_.clear();
  }
  for (const auto& [owner, lease] : held) sendRelease(owner, lease);
}

Stats RdmaModule::stats() const {
  Stats out;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, region] : regions_) {
      if (!region.dropping) ++out.registered;
      if (region.staging) ++out.staged;
    }
    out.leases = leases_.size();
  }
  {
    std::lock_guard lock(heldMutex_);
    out.held = held_.size();
    out.inFlight = inFlight_;
  }
  out.attached = mpi_ ? mpi_->windowAttached() : 0;
  out.window = windowService() != nullptr;
  out.cudaAwareMpi = mpi_ && mpi_->cudaAware();
  out.deviceMemory = device_ != nullptr;
  out.fallbackTransfers = fallbackTransfers_;
  out.singleCopyTransfers = singleCopyTransfers_;
  out.deadlines = deadlines_->size();
  return out;
}

}  // namespace detail

Proc::ModuleFactory rdmaModule(std::shared_ptr<Executor> pool) {
  return [pool] { return std::make_unique<detail::RdmaModule>(pool); };
}

Stats stats(Proc& proc) { return detail::RdmaModule::of(proc).stats(); }

}  // namespace crown::rdma
