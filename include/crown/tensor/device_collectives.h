// DeviceCollectives: the collectives of tensors on a device (GPU shards),
// one implementation per DeviceKind, registered by the target that has it
// (NCCL's, in src/cuda, linked on top of the core: style.md). The engine
// agrees on the inputs over MPI as for CPU tensors (collectives.h), then
// hands a device tensor's data movement to the registered implementation
// (and a fetch of a device shard, its copy to the host); without one, such
// a collective or fetch fails, saying that this build has none.
// Registration is thread-safe; run() is called on the engine's thread.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "crown/actor/mpi_service.h"
#include "crown/tensor/command.h"

namespace crown::tensor {

/// Where a collective runs: its MPI communicator (for bootstrapping the
/// device's own, e.g. an ncclUniqueId over MPI_Bcast), its members as world
/// ranks in group order, this rank's index among them, and whether crown
/// still hears a member (a device collective waiting on a lost one ends,
/// throwing ProcessLost: DLV-1).
struct CollectiveGroup {
  MpiService& mpi;
  Comm comm;
  const std::vector<Rank>& members;
  std::size_t index = 0;
  std::function<bool(Rank)> alive = [](Rank) { return true; };
};

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  /// Runs `command` (its kind, reduction and root) on `input`, a tensor on
  /// this implementation's device, and returns the result (on the device).
  /// Every member calls it for the same command, in the same order. Throws
  /// to poison the result here.
  virtual LocalTensor run(const Collective& command, const CollectiveGroup& group,
                          const LocalTensor& input) = 0;
  /// A host copy of `tensor` (for a fetch of a device shard).
  virtual LocalTensor toHost(const LocalTensor& tensor) = 0;
};

/// Registers (or replaces) the collectives of tensors on `kind`.
void registerDeviceCollectives(DeviceKind kind, std::shared_ptr<DeviceCollectives> collectives);
/// The collectives of tensors on `kind`, or null.
std::shared_ptr<DeviceCollectives> findDeviceCollectives(DeviceKind kind);

}  // namespace crown::tensor
