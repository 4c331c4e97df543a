// The process-wide registries of kernels and their guards by name, and of
// device collectives by device. They hold code, the same on every proc of a
// process, so one registry serves every engine.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "crown/tensor/device_collectives.h"
#include "crown/tensor/kernel.h"

namespace crown::tensor {
namespace {

// One registry: values by key under a lock; find() gives an empty value
// for an unknown key.
template <class Key, class Value>
class Registry {
 public:
  void set(const Key& key, Value value) {
    std::lock_guard lock(mutex_);
    values_[key] = std::move(value);
  }
  Value find(const Key& key) const {
    std::lock_guard lock(mutex_);
    auto it = values_.find(key);
    return it == values_.end() ? Value{} : it->second;
  }
  std::vector<Key> keys() const {
    std::lock_guard lock(mutex_);
    std::vector<Key> out;
    for (const auto& [key, value] : values_) out.push_back(key);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Key, Value> values_;
};

// Never destroyed: engines that outlive this file's statics at exit (a
// static Runtime's) still look kernels up.
template <class Key, class Value>
Registry<Key, Value>& registry() {
  static auto* instance = new Registry<Key, Value>;
  return *instance;
}

auto& kernels() { return registry<std::string, Kernel>(); }
auto& guards() { return registry<std::string, KernelGuard>(); }
auto& devices() { return registry<int, std::shared_ptr<DeviceCollectives>>(); }

}  // namespace

void registerKernel(const std::string& name, Kernel kernel) { kernels().set(name, std::move(kernel)); }
Kernel findKernel(const std::string& name) { return kernels().find(name); }
std::vector<std::string> kernelNames() { return kernels().keys(); }

void registerKernelGuard(const std::string& kernel, KernelGuard guard) {
  guards().set(kernel, std::move(guard));
}
KernelGuard findKernelGuard(const std::string& kernel) { return guards().find(kernel); }

void registerDeviceCollectives(DeviceKind kind, std::shared_ptr<DeviceCollectives> collectives) {
  devices().set(static_cast<int>(kind), std::move(collectives));
}
std::shared_ptr<DeviceCollectives> findDeviceCollectives(DeviceKind kind) {
  return devices().find(static_cast<int>(kind));
}

}  // namespace crown::tensor
