// The process-wide registries of kernels by name and of device collectives
// by device. Both are code, the same on every proc of a process, so one
// registry serves every engine.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "crown/tensor/device_collectives.h"
#include "crown/tensor/kernel.h"

namespace crown::tensor {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, Kernel> kernels;
  std::unordered_map<std::string, KernelGuard> guards;
};

// Never destroyed (as the device registry below): engines that outlive
// this file's statics at exit (a static Runtime's) still look kernels up.
Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

}  // namespace

void registerKernel(const std::string& name, Kernel kernel) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.kernels[name] = std::move(kernel);
}

Kernel findKernel(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.kernels.find(name);
  return it == r.kernels.end() ? Kernel{} : it->second;
}

void registerKernelGuard(const std::string& kernel, KernelGuard guard) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.guards[kernel] = std::move(guard);
}

KernelGuard findKernelGuard(const std::string& kernel) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.guards.find(kernel);
  return it == r.guards.end() ? KernelGuard{} : it->second;
}

std::vector<std::string> kernelNames() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, kernel] : r.kernels) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
struct DeviceRegistry {
  std::mutex mutex;
  std::unordered_map<int, std::shared_ptr<DeviceCollectives>> byKind;
};
DeviceRegistry& devices() {
  static DeviceRegistry* instance = new DeviceRegistry;
  return *instance;
}
}  // namespace

void registerDeviceCollectives(DeviceKind kind, std::shared_ptr<DeviceCollectives> collectives) {
  auto& r = devices();
  std::lock_guard lock(r.mutex);
  r.byKind[static_cast<int>(kind)] = std::move(collectives);
}

std::shared_ptr<DeviceCollectives> findDeviceCollectives(DeviceKind kind) {
  auto& r = devices();
  std::lock_guard lock(r.mutex);
  auto it = r.byKind.find(static_cast<int>(kind));
  return it == r.byKind.end() ? nullptr : it->second;
}

}  // namespace crown::tensor
