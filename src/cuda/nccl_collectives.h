// NcclCollectives: the collectives of CUDA tensors (DeviceKind::cuda) over
// NCCL, behind the tensor layer's device seam (crown/tensor/device_collectives.h).
// Private to the crown_nccl target: the core never sees CUDA or NCCL
// (style.md). nccl_registrar.cpp registers one instance for every program
// that links Crown::crown.
//
// One NCCL communicator per group (per MPI Comm id of the engine's
// collectives), made on first use: member 0 makes the ncclUniqueId, the MPI
// service broadcasts it over the group's communicator (THR-1: no MPI call
// here), then every member joins with ncclCommInitRank. One CUDA stream per
// device. run() and toHost() are called on the engine's thread; a mutex
// guards the caches, so engines of several procs in one process may share it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "crown/tensor/device_collectives.h"

namespace crown::cuda {

namespace detail {

/// NCCL's element type for `type`, or none (bool, int16: NCCL has neither).
std::optional<ncclDataType_t> ncclType(tensor::ScalarType type);

/// How a Reduction runs on NCCL: its op, and whether the sum must be divided
/// by the group's size afterwards (avg on an NCCL older than 2.10, which has
/// no ncclAvg).
struct NcclReduction {
  ncclRedOp_t op = ncclSum;
  bool divideAfter = false;
  friend bool operator==(const NcclReduction&, const NcclReduction&) = default;
};
/// `version`: the linked library's NCCL_VERSION_CODE (ncclGetVersion).
NcclReduction ncclReduction(tensor::Reduction reduction, int version);

/// The shape of `kind`'s result for an input of `shape` over `members`
/// (allgather stacks on a new dimension 0, reduceScatter keeps a block).
std::vector<std::int64_t> resultShape(tensor::CollectiveKind kind, std::vector<std::int64_t> shape,
                                      std::size_t members);

/// A contiguous copy of the CPU tensor `host` on CUDA device `device`
/// (cudaMalloc'd, freed with its last LocalTensor). Throws crown::Error
/// without a device.
tensor::LocalTensor toDevice(const tensor::LocalTensor& host, int device);

}  // namespace detail

class NcclCollectives final : public tensor::DeviceCollectives {
 public:
  NcclCollectives() = default;
  /// Leaves the communicators and streams to the process's end (see the .cpp).
  ~NcclCollectives() override;

  tensor::LocalTensor run(const tensor::Collective& command, const tensor::CollectiveGroup& group,
                          const tensor::LocalTensor& input) override;
  tensor::LocalTensor toHost(const tensor::LocalTensor& tensor) override;

 private:
  struct Communicator {
    std::mutex mutex;  // held while it is made
    ncclComm_t comm = nullptr;
    int device = -1;     // the CUDA device it was made on
    std::string failed;  // why it is unusable ("" when it is fine)
  };
  std::shared_ptr<Communicator> communicator(std::uint32_t commId);
  void initialise(Communicator& c, const tensor::CollectiveGroup& group, int device);
  cudaStream_t stream(int device);
  // Waits for `stream`, watching `c` for NCCL's asynchronous errors and
  // `group` for lost members; either aborts `c` (nccl_wait.h).
  void wait(cudaStream_t stream, Communicator& c, const tensor::CollectiveGroup& group,
            const std::string& op);
  int version();

  std::mutex mutex_;
  std::map<std::uint32_t, std::shared_ptr<Communicator>> comms_;
  std::map<int, cudaStream_t> streams_;
  int version_ = -1;
};

}  // namespace crown::cuda
