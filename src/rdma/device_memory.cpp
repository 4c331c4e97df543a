// The registered DeviceMemory (crown/rdma/device_memory.h).
#include "crown/rdma/device_memory.h"

#include <cstring>
#include <mutex>

namespace crown::rdma {
namespace {

struct Registered {
  std::mutex mutex;
  std::shared_ptr<DeviceMemory> memory;
};

// Never destroyed: a static Runtime's procs may copy during exit, after
// this file's statics would have gone (as the tensor registries).
Registered& registered() {
  static auto* one = new Registered;
  return *one;
}

}  // namespace

void registerDeviceMemory(std::shared_ptr<DeviceMemory> memory) {
  std::lock_guard lock(registered().mutex);
  registered().memory = std::move(memory);
}

std::shared_ptr<DeviceMemory> deviceMemory() {
  std::lock_guard lock(registered().mutex);
  return registered().memory;
}

bool isDeviceMemory(const void* p) {
  auto memory = deviceMemory();
  return memory && memory->isDevice(p);
}

void copyMemory(void* dst, const void* src, std::size_t bytes) {
  if (auto memory = deviceMemory(); memory && (memory->isDevice(dst) || memory->isDevice(src))) {
    return memory->copy(dst, src, bytes);
  }
  std::memcpy(dst, src, bytes);
}

}  // namespace crown::rdma
