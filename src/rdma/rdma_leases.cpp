// The owner side of the rdma module (rdma_module.h), its leases: a reader
// is granted one over a registered region (checked against the region, so
// an edited handle moves nothing), reads or writes through it, and
// releases it; revoking one tells its reader.
#include <unistd.h>

#include <cstdio>

#include "crown/common/log.h"
#include "rdma/cma.h"
#include "rdma/messages.h"
#include "rdma/rdma_module.h"

namespace crown::rdma {
namespace detail {
namespace {

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

Grant RdmaModule::acquire(Rank reader, std::uint64_t id, std::uint64_t address, std::uint64_t bytes,
                          bool write) {
  std::lock_guard lock(mutex_);
  auto named = [&] {
    return "RDMA buffer " + std::to_string(id) + " of rank " + std::to_string(proc_->rank());
  };
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.dropping) {
    std::string why = it != regions_.end() ? it->second.dropReason : "";
    if (why.empty()) {
      auto gone = gone_.find(id);
      why = gone != gone_.end() ? gone->second : "dropped";
    }
    return refusal(named() + " was " + why + ": it can no longer be read or written");
  }
  Region& region = it->second;
  if (bytes > region.bytes) {
    return refusal(named() + " holds " + std::to_string(region.bytes) + " bytes, not " +
                   std::to_string(bytes));
  }
  // The handle's address is data from the wire (an edited or corrupted
  // handle names any address it likes): the transfer must lie within the
  // region, and from here on only the owner's own numbers say where bytes
  // go, so nothing outside a registered region is ever read or written.
  std::uint64_t offset = address - region.address;  // wraps when below: then >= region.bytes
  if (address < region.address || offset >= region.bytes || bytes > region.bytes - offset) {
    return refusal(named() + ": the handle names " + std::to_string(bytes) + " bytes at " +
                   hex(address) + ", outside its registered region (" +
                   std::to_string(region.bytes) + " bytes at " + hex(region.address) +
                   "): refused, nothing moved (an edited or corrupted handle?)");
  }
  if (write && region.readOnly) return refusal(named() + " is read-only");
  std::uint64_t lease = nextLease_++;
  leases_.emplace(lease, Lease{.reader = reader, .region = id, .offset = offset});
  ++region.leases;
  Grant grant;
  grant.lease = lease;
  grant.bytes = region.bytes - offset;
  grant.writable = !region.readOnly;
  grant.staged = region.staging != nullptr;
  grant.address = region.address + offset;
  if (region.exposedOnHost) {
    grant.machine = machineId();
    grant.pid = static_cast<std::int32_t>(::getpid());
    char* exposed = region.staging ? region.staging : region.base;
    grant.memory = reinterpret_cast<std::uint64_t>(exposed) + offset;
  }
  return grant;
}

void RdmaModule::release(std::uint64_t lease) {
  std::unique_ptr<Region> retired;
  std::vector<StageRequest> start;
  {
    std::lock_guard lock(mutex_);
    auto it = leases_.find(lease);
    if (it == leases_.end()) return;  // ended already (its reader was lost)
    std::uint64_t id = it->second.region;
    if (auto region = regions_.find(id); region != regions_.end()) {
      // A lost reader's staging holds end with its lease.
      unlockStage(region->second, it->second, false, true, start);
      --region->second.leases;
    }
    leases_.erase(it);
    retired = retireIfIdle(id);
  }
  startStages(std::move(start));
  finishRetired(std::move(retired));
}

std::pair<RdmaModule::Lease&, RdmaModule::Region&> RdmaModule::leasedRegion(std::uint64_t lease) {
  auto it = leases_.find(lease);
  if (it == leases_.end()) throw BufferError("RDMA: lease " + std::to_string(lease) + " has ended");
  return {it->second, regions_.at(it->second.region)};
}

char* RdmaModule::leased(std::uint64_t lease, std::uint64_t offset, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto [held, region] = leasedRegion(lease);
  std::uint64_t covered = region.bytes - held.offset;  // acquire kept offset < bytes
  if (offset > covered || bytes > covered - offset) {
    throw BufferError("RDMA: a chunk past the end of the buffer");
  }
  return region.base + held.offset + offset;
}

void RdmaModule::sendRevoke(Rank reader, std::uint64_t lease) {
  try {
    proc_->send(ActorId{reader, agent_}, Revoke{lease});
  } catch (const std::exception& e) {
    // The reader is gone (its leases end in peerLost) or this proc stops.
    log::get().debug("RDMA: revoking lease {} of rank {}: {}", lease, reader, e.what());
  }
}

}  // namespace detail
}  // namespace crown::rdma
