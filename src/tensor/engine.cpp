// The engine's handlers: a batch runs command by command; fetch and sync
// answer after every command before them (they wait behind the batches in
// the actor's mailbox, ORD-1).
#include "crown/tensor/engine.h"

#include "crown/common/log.h"
#include "crown/mesh/point.h"
#include "crown/tensor/device_collectives.h"
#include "crown/tensor/kernel.h"
#include "tensor/collectives.h"
#include "tensor/native_kernels.h"
#include "tensor/ref_table.h"

namespace crown::tensor {

using detail::RefTable;

struct Engine::Impl {
  Impl(Proc& proc, mesh::Point point, std::uint64_t seed)
      : proc(proc),
        point(point),
        coords(point.coordinates()),
        // Mixed with the rank so every proc draws its own numbers.
        generator(seed ^ (0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(point.rank) + 1))),
        collectives(proc, point.shape) {}

  RefTable::Poison failure(const std::string& op, std::string message, const std::string& origin,
                           std::string traceback = {}) const {
    return std::make_shared<const Failure>(
        Failure{op, proc.rank(), std::move(message), std::move(traceback), origin});
  }

  void poisonAll(const std::vector<RefId>& results, const RefTable::Poison& poison) {
    for (RefId ref : results) refs.poison(ref, poison);
  }

  void run(const Command& command) {
    ++ran;
    if (auto* c = std::get_if<Call>(&command)) return call(*c);
    if (auto* c = std::get_if<Collective>(&command)) {
      auto outcome = collectives.run(*c, refs.find(c->source));
      if (outcome.failure) return refs.poison(c->result, outcome.failure);
      return refs.define(c->result, std::move(outcome.result));
    }
    for (RefId ref : std::get<Delete>(command).refs) refs.erase(ref);
  }

  void call(const Call& c) {
    std::vector<LocalTensor> inputs;
    inputs.reserve(c.inputs.size());
    for (RefId ref : c.inputs) {
      const RefTable::Value* value = refs.find(ref);
      if (!value) {
        return poisonAll(c.results, failure(c.kernel,
                                            "its input ref " + std::to_string(ref) +
                                                " is not defined here (dropped, or never made)",
                                            c.origin));
      }
      if (auto* poison = std::get_if<RefTable::Poison>(value)) return poisonAll(c.results, *poison);
      inputs.push_back(std::get<LocalTensor>(*value));
    }
    Kernel kernel = findKernel(c.kernel);
    if (!kernel) {
      std::string known;
      for (const auto& name : kernelNames()) known += (known.empty() ? "" : ", ") + name;
      return poisonAll(c.results,
                       failure(c.kernel, "no kernel is registered under this name (known: " +
                                             known + ")",
                               c.origin));
    }
    try {
      KernelContext context{c, proc.rank(), coords, generator};
      std::vector<LocalTensor> outputs = kernel(context, inputs);
      if (outputs.size() != c.results.size()) {
        throw Error("it returned " + std::to_string(outputs.size()) + " tensors for " +
                    std::to_string(c.results.size()) + " results");
      }
      for (std::size_t i = 0; i < outputs.size(); ++i) refs.define(c.results[i], outputs[i]);
    } catch (const KernelError& e) {
      poisonAll(c.results, failure(e.op().empty() ? c.kernel : e.op(), e.what(), c.origin,
                                   e.traceback()));
    } catch (const std::exception& e) {
      poisonAll(c.results, failure(c.kernel, e.what(), c.origin));
    }
  }

  static LocalTensor onHost(const LocalTensor& tensor) {
    if (tensor.device().kind == DeviceKind::cpu) return tensor;
    auto device = findDeviceCollectives(tensor.device().kind);
    if (!device) {
      throw ConfigError(tensor.describe() + " is on a GPU, and this build of crown cannot copy "
                        "it to the host (configure with CROWN_WITH_NCCL=ON)");
    }
    return device->toHost(tensor);
  }

  FetchReply fetch(RefId ref) const {
    FetchReply reply;
    const RefTable::Value* value = refs.find(ref);
    if (!value) {
      reply.failure = *failure("fetch", "ref " + std::to_string(ref) +
                                            " is not defined here (dropped, or never made)",
                               "");
    } else if (auto* poison = std::get_if<RefTable::Poison>(value)) {
      reply.failure = **poison;
    } else {
      try {
        reply.data = toData(onHost(std::get<LocalTensor>(*value)));
        reply.ok = true;
      } catch (const std::exception& e) {
        reply.failure = *failure("fetch", e.what(), "");
      }
    }
    return reply;
  }

  Proc& proc;
  mesh::Point point;
  std::map<std::string, std::size_t> coords;
  std::mt19937_64 generator;
  detail::RefTable refs;
  detail::Collectives collectives;
  std::uint64_t ran = 0;
};

Engine::Engine(std::uint64_t seed) {
  detail::registerNativeKernels();
  impl_ = std::make_unique<Impl>(Proc::current(), mesh::here(), seed);
  handle<CommandBatch>([this](const CommandBatch& batch) {
    for (const Command& command : batch.commands) impl_->run(command);
  });
  handle<FetchShard>([this](const FetchShard& fetch) { return impl_->fetch(fetch.ref); });
  handle<Sync>([this](const Sync&) { return EngineStats{impl_->ran, impl_->refs.size()}; });
}

Engine::~Engine() = default;

LocalTensor Engine::shard(RefId ref) const {
  const RefTable::Value* value = impl_->refs.find(ref);
  if (!value) throw Error("ref " + std::to_string(ref) + " is not defined on this proc");
  if (auto* poison = std::get_if<RefTable::Poison>(value)) throw Error((*poison)->describe());
  return std::get<LocalTensor>(*value);
}

}  // namespace crown::tensor
