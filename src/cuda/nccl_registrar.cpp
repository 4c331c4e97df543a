// Registers NCCL as the collectives of CUDA tensors (and the kernels
// cuda.to_device and cuda.to_host) in every program that links
// Crown::crown, before main runs and before any engine starts, with no call
// in user code.
//
// How it gets into every program: this file is a static initialiser in the
// crown_nccl archive, and nothing refers to it by name, so a plain link of
// the archive would drop it (the linker takes only the objects that resolve
// an undefined symbol). src/CMakeLists.txt puts crown_nccl on the Crown::crown
// interface as $<LINK_LIBRARY:WHOLE_ARCHIVE,crown_nccl>: every object of the
// archive is linked into each program and each shared module (the Python
// extension) that links Crown::crown, whatever else it uses. A call that user
// code must make, or a symbol the core would have to reference, would put
// NCCL (or its name) back into the core, which style.md keeps out.
//
// Order: static initialisers of different objects run in no set order. The
// registry is a function-local static (made on first use, so safe here), and
// this registers only when nothing did before: a program that registers its
// own collectives for DeviceKind::cuda (a test's stand-in GPU) keeps them,
// whether its initialiser runs before this one or after (registering
// replaces).
#include <memory>

#include "crown/cuda/device.h"
#include "crown/tensor/kernel.h"
#include "cuda/nccl_collectives.h"

namespace crown::cuda {
namespace {

using tensor::DeviceKind;
using tensor::KernelContext;
using tensor::LocalTensor;

const bool kRegistered = [] {
  if (!tensor::findDeviceCollectives(DeviceKind::cuda))
    tensor::registerDeviceCollectives(DeviceKind::cuda, std::make_shared<NcclCollectives>());
  // A CPU shard to a device: ints[0] names the device; without it, the
  // rank's world rank modulo the devices of its machine (one device per
  // local rank when ranks fill each host in turn, as mpirun does by default).
  tensor::registerKernel("cuda.to_device", [](KernelContext& c,
                                              const std::vector<LocalTensor>& in) {
    CROWN_CHECK(in.size() == 1, "cuda.to_device takes one tensor");
    int count = deviceCount();
    int device = !c.call.ints.empty() ? static_cast<int>(c.call.ints[0])
                 : count > 0         ? static_cast<int>(c.rank % static_cast<Rank>(count))
                                     : 0;
    return std::vector<LocalTensor>{detail::toDevice(in[0], device)};
  });
  tensor::registerKernel("cuda.to_host", [](KernelContext&, const std::vector<LocalTensor>& in) {
    CROWN_CHECK(in.size() == 1, "cuda.to_host takes one tensor");
    auto device = tensor::findDeviceCollectives(DeviceKind::cuda);
    CROWN_CHECK(device != nullptr, "no collectives for CUDA tensors are registered");
    return std::vector<LocalTensor>{device->toHost(in[0])};
  });
  return true;
}();

}  // namespace
}  // namespace crown::cuda
