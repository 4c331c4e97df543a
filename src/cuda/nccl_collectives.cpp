// NcclCollectives: a device tensor's collective over NCCL, once the engine's
// members agreed over MPI on its element count and type (tensor/collectives.h).
#include "cuda/nccl_collectives.h"
#include "cuda/nccl_wait.h"

#include <climits>
#include <cstdio>
#include <cstring>

#include "crown/common/error.h"
#include "crown/cuda/device.h"
#include "crown/cuda/nccl.h"
#include "cuda/cuda_check.h"
#include "cuda/nccl_check.h"

namespace crown::cuda {

using tensor::CollectiveGroup;
using tensor::CollectiveKind;
using tensor::Device;
using tensor::DeviceKind;
using tensor::LocalTensor;
using tensor::Reduction;
using tensor::ScalarType;

namespace {

constexpr std::int64_t kNone = INT64_MAX;

std::string where(const Device& device) { return "cuda:" + std::to_string(device.index); }

// Device memory from cudaMalloc, freed with the last LocalTensor that holds it.
struct DeviceBlock final : tensor::Owner {
  void* memory = nullptr;
  ~DeviceBlock() override {
    // At the process's end the CUDA runtime may already be unloaded (its
    // teardown and ours are in no set order): nothing is left to free then,
    // and the error is ignored.
    if (memory) cudaFree(memory);
  }
};

// A new contiguous tensor on `device` (the current device must be it).
LocalTensor allocateOn(const Device& device, ScalarType type, std::vector<std::int64_t> shape) {
  auto block = std::make_shared<DeviceBlock>();
  std::size_t bytes =
      static_cast<std::size_t>(tensor::elementCount(shape)) * tensor::elementSize(type);
  if (bytes > 0) {
    cudaError_t code = cudaMalloc(&block->memory, bytes);
    if (code == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error("out of device memory: cannot allocate " + std::to_string(bytes) + " bytes for " +
                  LocalTensor::wrap(type, shape, {}, nullptr, block).describe() + " on " +
                  where(device));
    }
    CROWN_CHECK_CUDA(code);
  }
  void* data = block->memory;
  return LocalTensor::wrap(type, std::move(shape), {}, data, std::move(block), device);
}

void requireDevice(const LocalTensor& tensor, const char* what) {
  if (tensor.device().kind != DeviceKind::cuda)
    throw ConfigError(std::string(what) + ": " + tensor.describe() + " is not a CUDA tensor");
  int count = deviceCount();
  if (count == 0) {
    throw Error(std::string(what) + ": " + tensor.describe() + " is on " + where(tensor.device()) +
                ", and this machine has no CUDA device (no driver, or no GPU)");
  }
  if (tensor.device().index < 0 || tensor.device().index >= count) {
    throw ConfigError(std::string(what) + ": " + tensor.describe() + " is on " +
                      where(tensor.device()) + ", and this machine has " + std::to_string(count) +
                      " CUDA device(s)");
  }
}

// avg on an NCCL without ncclAvg: the sum, divided on the host (integer
// division for integers, as the CPU path). Only NCCL < 2.10 comes here.
template <class T>
void divideAll(LocalTensor& host, std::size_t count) {
  for (std::int64_t i = 0; i < host.numel(); ++i)
    host.data<T>()[i] = static_cast<T>(host.data<T>()[i] / static_cast<T>(count));
}
void divideOnHost(LocalTensor& host, std::size_t count) {
  switch (host.dtype()) {
    case ScalarType::u8:
      return divideAll<std::uint8_t>(host, count);
    case ScalarType::i8:
      return divideAll<std::int8_t>(host, count);
    case ScalarType::i32:
      return divideAll<std::int32_t>(host, count);
    case ScalarType::i64:
      return divideAll<std::int64_t>(host, count);
    case ScalarType::f32:
      return divideAll<float>(host, count);
    case ScalarType::f64:
      return divideAll<double>(host, count);
    default:
      throw ConfigError(std::string("avg of ") + tensor::scalarName(host.dtype()) +
                        " needs NCCL >= 2.10 (ncclAvg)");
  }
}

}  // namespace

namespace detail {

LocalTensor toDevice(const LocalTensor& host, int device) {
  CROWN_CHECK(host.device().kind == DeviceKind::cpu, "toDevice takes a CPU tensor");
  int count = deviceCount();
  if (count == 0) {
    throw Error("cannot copy " + host.describe() + " to cuda:" + std::to_string(device) +
                ": this machine has no CUDA device (no driver, or no GPU)");
  }
  if (device < 0 || device >= count) {
    throw ConfigError("cannot copy " + host.describe() + " to cuda:" + std::to_string(device) +
                      ": this machine has " + std::to_string(count) + " CUDA device(s)");
  }
  CROWN_CHECK_CUDA(cudaSetDevice(device));
  LocalTensor dense = host.contiguousCopy();
  LocalTensor out = allocateOn(Device{DeviceKind::cuda, device}, host.dtype(), host.shape());
  if (out.nbytes() > 0)
    CROWN_CHECK_CUDA(cudaMemcpy(out.data(), dense.data(), out.nbytes(), cudaMemcpyHostToDevice));
  return out;
}

}  // namespace detail

// The communicators and streams are left to the process's end on purpose:
// this object lives in a static registry, destroyed after main returns, when
// the CUDA runtime may already be unloaded (the order of static teardown
// across libraries is not set) and the other members may be gone, and
// ncclCommDestroy then can fail or wait on peers that never come. The
// driver frees a process's GPU resources when it exits.
NcclCollectives::~NcclCollectives() = default;

int NcclCollectives::version() {
  std::lock_guard lock(mutex_);
  if (version_ < 0) version_ = ncclVersion();  // 0 when NCCL cannot say: then no ncclAvg
  return version_;
}

std::shared_ptr<NcclCollectives::Communicator> NcclCollectives::communicator(std::uint32_t id) {
  std::lock_guard lock(mutex_);
  auto& slot = comms_[id];
  if (!slot) slot = std::make_shared<Communicator>();
  return slot;
}

cudaStream_t NcclCollectives::stream(int device) {
  std::lock_guard lock(mutex_);
  if (auto it = streams_.find(device); it != streams_.end()) return it->second;
  // A blocking stream (not cudaStreamNonBlocking): it waits for the work
  // queued before on the legacy default stream, where torch runs a device
  // tensor's kernels unless told otherwise, so NCCL reads finished inputs.
  cudaStream_t made = nullptr;
  CROWN_CHECK_CUDA(cudaStreamCreate(&made));
  streams_.emplace(device, made);
  return made;
}

void NcclCollectives::initialise(Communicator& c, const CollectiveGroup& group, int device) {
  // Member 0 makes the id and says whether it could; the MPI service
  // broadcasts both (THR-1), so a failed ncclGetUniqueId fails every member
  // instead of leaving them waiting in ncclCommInitRank.
  struct Bootstrap {
    ncclUniqueId id;
    std::int32_t ok;
    char why[200];
  } boot;
  std::memset(&boot, 0, sizeof boot);
  if (group.index == 0) {
    ncclResult_t code = ncclGetUniqueId(&boot.id);
    boot.ok = code == ncclSuccess;
    if (!boot.ok) std::snprintf(boot.why, sizeof boot.why, "%s", ncclGetErrorString(code));
  }
  if (group.members.size() > 1) group.mpi.broadcast(group.comm, &boot, sizeof boot, 0).get();
  if (!boot.ok) {
    c.failed = std::string("ncclGetUniqueId failed on rank ") +
               std::to_string(group.members.at(0)) + ": " + boot.why;
    throw Error(c.failed);
  }
  ncclComm_t comm = nullptr;
  // Collective: returns once every member has joined.
  ncclResult_t code = ncclCommInitRank(&comm, static_cast<int>(group.members.size()), boot.id,
                                       static_cast<int>(group.index));
  if (code != ncclSuccess) {
    c.failed = std::string("ncclCommInitRank failed: ") + ncclGetErrorString(code);
    throw Error(c.failed);
  }
  c.comm = comm;
  c.device = device;
}

void NcclCollectives::wait(cudaStream_t s, Communicator& c, const CollectiveGroup& group,
                           const std::string& op) {
  // The engine runs one command at a time and the result must be complete
  // when run() returns (the next command, a fetch, reads it), so this waits
  // for the stream. It polls instead of cudaStreamSynchronize, which would
  // hang the engine for good on a lost peer (nccl_wait.h).
  cudaError_t code = cudaErrorNotReady;  // the last poll's answer, read by failure()
  detail::CollectiveWait waiting{
      .finished =
          [&] {
            code = cudaStreamQuery(s);
            return code == cudaSuccess;
          },
      .failure = [&]() -> std::string {
        if (code != cudaErrorNotReady) {
          cudaGetLastError();
          return std::string("on the device: ") + cudaGetErrorString(code);
        }
        ncclResult_t async = ncclSuccess;
        ncclResult_t asked = ncclCommGetAsyncError(c.comm, &async);
        if (asked != ncclSuccess) async = asked;
        return async == ncclSuccess ? "" : ncclGetErrorString(async);
      },
      .members = group.members,
      .alive = group.alive,
      .abort =
          [&] {
            ncclCommAbort(c.comm);  // ends its kernels; the communicator is gone
            c.comm = nullptr;
          },
  };
  try {
    detail::awaitCollective(waiting, op);
  } catch (const std::exception& e) {
    c.failed = e.what();  // later collectives of this group fail at once, saying why
    throw;
  }
}

LocalTensor NcclCollectives::run(const tensor::Collective& command, const CollectiveGroup& group,
                                 const LocalTensor& input) {
  const std::string op = std::string("NCCL ") + tensor::collectiveName(command.kind);
  const std::size_t members = group.members.size();
  const int device = input.device().index;

  // 1. What this member brings, checked before any member enters NCCL: a
  // member that fails inside an NCCL call leaves the others spinning in
  // theirs, so every reason to fail that can be known here is.
  std::string why;
  std::shared_ptr<Communicator> c;
  cudaStream_t s = nullptr;
  LocalTensor out;
  ncclDataType_t type = ncclUint8;
  std::size_t perElement = 1;  // NCCL elements per tensor element (bytes for untyped moves)
  detail::NcclReduction reduction;
  try {
    requireDevice(input, op.c_str());
    if (!input.contiguous()) {
      throw ConfigError(op + " of " + input.describe() +
                        ": NCCL takes contiguous device tensors; make it contiguous first");
    }
    bool reduces =
        command.kind == CollectiveKind::allreduce || command.kind == CollectiveKind::reduceScatter;
    if (auto t = detail::ncclType(input.dtype())) {
      type = *t;
    } else if (reduces) {
      throw ConfigError(op + " of " + input.describe() + ": NCCL has no " +
                        tensor::scalarName(input.dtype()) +
                        " type to reduce; convert it (to uint8 or int32) first");
    } else {
      perElement = tensor::elementSize(input.dtype());  // moved as bytes
    }
    if (reduces) {
      reduction = detail::ncclReduction(command.reduction, version());
      if (reduction.divideAfter &&
          (input.dtype() == ScalarType::f16 || input.dtype() == ScalarType::bf16)) {
        throw ConfigError(std::string("avg of ") + tensor::scalarName(input.dtype()) +
                          " needs NCCL >= 2.10 (ncclAvg); this one is " +
                          std::to_string(version()));
      }
    }
    c = communicator(group.comm.id());
    {
      std::lock_guard lock(c->mutex);
      if (!c->failed.empty())
        throw Error("this group's NCCL communicator failed earlier: " + c->failed);
      if (c->comm && c->device != device) {
        throw ConfigError(op + " of a tensor on cuda:" + std::to_string(device) +
                          ": this group's NCCL communicator is on cuda:" +
                          std::to_string(c->device) + "; keep a group's tensors on one device");
      }
    }
    CROWN_CHECK_CUDA(cudaSetDevice(device));
    s = stream(device);
    // In place as the CPU path: the result is the source's own memory (so
    // every view of it sees the result) when the command says so.
    bool inPlace = command.result == command.source && (command.kind == CollectiveKind::allreduce ||
                                                        command.kind == CollectiveKind::broadcast);
    out = inPlace ? input
                  : allocateOn(input.device(), input.dtype(),
                               detail::resultShape(command.kind, input.shape(), members));
  } catch (const std::exception& e) {
    why = e.what();
    if (why.empty()) why = op + " failed";
  }

  // 2. The members agree: one small allreduce of the lowest member that
  // cannot take part, so that all of them fail or none enters NCCL. A member
  // alone has no one to wait for.
  std::int64_t failed = why.empty() ? kNone : static_cast<std::int64_t>(group.index);
  if (members > 1) group.mpi.allreduce(group.comm, &failed, 1, DType::i64, ReduceOp::min).get();
  if (failed != kNone) {
    if (!why.empty()) throw Error(why);
    throw Error(op + " not run: rank " +
                std::to_string(group.members.at(static_cast<std::size_t>(failed))) +
                " of the group could not take part (its own error says why)");
  }
  if (input.numel() == 0) return out;  // the same on every member (agreed by the engine)

  // 3. The communicator on first use, then the data.
  std::lock_guard lock(c->mutex);
  if (!c->comm) initialise(*c, group, device);
  const auto* send = static_cast<const std::byte*>(input.data());
  auto* recv = static_cast<std::byte*>(out.data());
  const std::size_t count = static_cast<std::size_t>(input.numel()) * perElement;
  try {
    switch (command.kind) {
      case CollectiveKind::allreduce:
        CROWN_CHECK_NCCL(ncclAllReduce(send, recv, count, type, reduction.op, c->comm, s));
        break;
      case CollectiveKind::reduceScatter:
        CROWN_CHECK_NCCL(
            ncclReduceScatter(send, recv, count / members, type, reduction.op, c->comm, s));
        break;
      case CollectiveKind::allgather:
        CROWN_CHECK_NCCL(ncclAllGather(send, recv, count, type, c->comm, s));
        break;
      case CollectiveKind::alltoall: {
        // Block j of dimension 0 goes to member j; block i comes from member
        // i. One group, so every send and receive progresses together.
        const std::size_t block = count / members;
        const std::size_t blockBytes = input.nbytes() / members;
        CROWN_CHECK_NCCL(ncclGroupStart());
        try {
          for (std::size_t peer = 0; peer < members; ++peer) {
            CROWN_CHECK_NCCL(ncclSend(send + peer * blockBytes, block, type, static_cast<int>(peer),
                                      c->comm, s));
            CROWN_CHECK_NCCL(ncclRecv(recv + peer * blockBytes, block, type, static_cast<int>(peer),
                                      c->comm, s));
          }
        } catch (...) {
          ncclGroupEnd();
          throw;
        }
        CROWN_CHECK_NCCL(ncclGroupEnd());
        break;
      }
      case CollectiveKind::broadcast:
        CROWN_CHECK_NCCL(
            ncclBroadcast(send, recv, count, type, static_cast<int>(command.root), c->comm, s));
        break;
    }
  } catch (const Error& e) {
    // The others may be inside the collective already: aborting lets NCCL
    // tell them (their wait() sees the error) rather than leave them spinning.
    c->failed = e.what();
    ncclCommAbort(c->comm);
    c->comm = nullptr;
    throw;
  }
  wait(s, *c, group, op);
  if (reduction.divideAfter && command.reduction == Reduction::avg) {
    LocalTensor host = toHost(out);
    divideOnHost(host, members);
    CROWN_CHECK_CUDA(cudaMemcpy(out.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice));
  }
  return out;
}

LocalTensor NcclCollectives::toHost(const LocalTensor& tensor) {
  requireDevice(tensor, "copy to the host");
  if (!tensor.contiguous()) {
    throw ConfigError("copy to the host: " + tensor.describe() + " on " + where(tensor.device()) +
                      " is not contiguous; make it contiguous on the device first");
  }
  CROWN_CHECK_CUDA(cudaSetDevice(tensor.device().index));
  LocalTensor host = LocalTensor::allocate(tensor.dtype(), tensor.shape());
  // cudaMemcpy runs on the legacy default stream: it waits for the work
  // queued before on blocking streams (ours, and torch's default one).
  if (host.nbytes() > 0)
    CROWN_CHECK_CUDA(cudaMemcpy(host.data(), tensor.data(), host.nbytes(), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace crown::cuda
