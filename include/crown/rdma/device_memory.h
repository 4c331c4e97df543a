// DeviceMemory: how the rdma layer reaches memory that the host cannot
// touch (a GPU's), registered by the target that has such a device
// (src/cuda: CUDA's, linked on top of the core, style.md) or by a test's
// stand-in. Without one, every pointer is host memory.
//
// What the rdma layer does with device memory (docs/rdma.md):
// - with a CUDA-aware MPI, nothing special: MPI moves device memory itself;
// - otherwise, staging through pinned host memory: a registered device
//   buffer gets a pinned mirror that the window exposes, filled from the
//   device before each remote read and copied back after each remote write
//   (under the owner's staging lock: a read never sees half a write); a
//   reader's device memory goes through a pinned bounce buffer of its own;
// - on the owner's own proc, and over the fabric fallback, a copy() each way.
//
// Thread-safe: every method may be called from any of crown's threads.
#pragma once

#include <cstddef>
#include <memory>

namespace crown::rdma {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// True when `p` points into device memory.
  virtual bool isDevice(const void* p) const = 0;
  /// Copies `bytes` bytes from `src` to `dst`, either of which may be device
  /// or host memory; synchronous (done when it returns). Throws crown::Error.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// Host memory that the device copies to and from at full speed (pinned),
  /// and its release. Throws crown::Error when there is none to be had.
  virtual void* allocateStaging(std::size_t bytes) = 0;
  virtual void freeStaging(void* p, std::size_t bytes) = 0;
};

/// Registers (or replaces) the device memory of this program.
void registerDeviceMemory(std::shared_ptr<DeviceMemory> memory);
/// The registered device memory, or null (no device support in this build).
std::shared_ptr<DeviceMemory> deviceMemory();
/// True when a device memory is registered and `p` is in it.
bool isDeviceMemory(const void* p);
/// memcpy, or the device's copy when either side is device memory.
void copyMemory(void* dst, const void* src, std::size_t bytes);

}  // namespace crown::rdma
