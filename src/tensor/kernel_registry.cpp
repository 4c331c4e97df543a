// The process-wide registry of kernels by name. Kernels are code, the same
// on every proc of a process, so one registry serves every engine.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "crown/tensor/kernel.h"

namespace crown::tensor {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, Kernel> kernels;
};

Registry& registry() {
  static Registry instance;
  return instance;
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

std::vector<std::string> kernelNames() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, kernel] : r.kernels) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace crown::tensor
