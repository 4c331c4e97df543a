// What a tensor engine's stream runs (engine_impl.h): its commands in
// order (ORD-1): calls of kernels, collectives and transfers, each poisoning
// its results with a Failure when it fails or uses a poisoned ref (deferred
// errors); and the reads of a shard after the streams drained.
#include "crown/common/trace.h"
#include "crown/tensor/device_collectives.h"
#include "crown/tensor/kernel.h"
#include "tensor/engine_impl.h"
#include "tensor/transfer.h"

namespace crown::tensor {

using detail::RefTable;

RefTable::Poison Engine::Impl::failure(const std::string& op, std::string message,
                                       const std::string& origin, std::string traceback) const {
  return std::make_shared<const Failure>(
      Failure{op, proc.rank(), std::move(message), std::move(traceback), origin});
}

void Engine::Impl::poisonAll(const Refs& results, const RefTable::Poison& poison) {
  for (RefId ref : results) refs.poison(ref, poison);
}

void Engine::Impl::run(const Command& command, Stream& s) {
  ++ran;
  if (auto* c = std::get_if<Call>(&command)) return call(*c, s);
  if (auto* c = std::get_if<Collective>(&command)) {
    trace::Span span;
    if (trace::on()) [[unlikely]]
      span.begin("tensor", collectiveName(c->kind));
    auto source = refs.find(c->source);
    auto outcome = s.collectives.run(*c, source ? &*source : nullptr);
    if (outcome.failure) return refs.poison(c->result, outcome.failure);
    return refs.define(c->result, std::move(outcome.result));
  }
  if (auto* t = std::get_if<Transfer>(&command)) {
    trace::Span span;
    if (trace::on()) [[unlikely]]
      span.begin("tensor", t->sending ? "to_mesh send" : "to_mesh receive");
    return transfer(*t);
  }
}

void Engine::Impl::runFused(const std::vector<Collective>& commands, Stream& s) {
  ran += commands.size();
  trace::Span span;
  if (trace::on()) [[unlikely]]
    span.begin("tensor", "allreduce x" + std::to_string(commands.size()));
  std::vector<std::optional<RefTable::Value>> found;
  std::vector<const RefTable::Value*> sources;
  found.reserve(commands.size());
  for (const Collective& c : commands) {
    found.push_back(refs.find(c.source));
    sources.push_back(found.back() ? &*found.back() : nullptr);
  }
  auto outcomes = s.collectives.runFused(commands, sources);
  for (std::size_t i = 0; i < commands.size(); ++i) {
    if (outcomes[i].failure) {
      refs.poison(commands[i].result, outcomes[i].failure);
    } else {
      refs.define(commands[i].result, std::move(outcomes[i].result));
    }
  }
}

void Engine::Impl::transfer(const Transfer& t) {
  if (t.sending) {
    auto source = refs.find(t.source);
    return detail::sendShards(proc, t, source ? &*source : nullptr);
  }
  for (const auto& [from, to] : t.routes) {
    if (to == proc.rank()) return refs.define(t.result, detail::receiveShard(proc, t, from));
  }
}

void Engine::Impl::call(const Call& c, Stream& s, const Kernel* known) {
  trace::Span span;
  if (trace::on()) [[unlikely]]
    span.begin("tensor", c.kernel);
  // The stream's scratch vector, handed back emptied (no shard kept) on
  // every way out; taken, not borrowed, so that a call within a kernel
  // would get a vector of its own.
  struct Scratch {
    std::vector<LocalTensor>& home;
    std::vector<LocalTensor> taken = std::move(home);
    ~Scratch() {
      taken.clear();
      home = std::move(taken);
    }
  } scratch{s.inputs};
  std::vector<LocalTensor>& inputs = scratch.taken;
  for (RefId ref : c.inputs) {
    auto value = refs.find(ref);
    if (!value) {
      return poisonAll(c.results, failure(c.kernel,
                                          "its input ref " + std::to_string(ref) +
                                              " is not defined here (dropped, or never made)",
                                          c.origin.str()));
    }
    if (auto* poison = std::get_if<RefTable::Poison>(&*value)) return poisonAll(c.results, *poison);
    inputs.push_back(std::get<LocalTensor>(std::move(*value)));
  }
  Kernel found;
  if (known == nullptr) found = findKernel(c.kernel);
  const Kernel& kernel = known != nullptr ? *known : found;
  if (!kernel) {
    std::string names;
    for (const auto& name : kernelNames()) names += (names.empty() ? "" : ", ") + name;
    return poisonAll(
        c.results,
        failure(c.kernel, "no kernel is registered under this name (known: " + names + ")",
                c.origin.str()));
  }
  try {
    KernelContext context{c, proc.rank(), coords, s.generator};
    std::vector<LocalTensor> outputs = kernel(context, inputs);
    if (outputs.size() != c.results.size()) {
      throw Error("it returned " + std::to_string(outputs.size()) + " tensors for " +
                  std::to_string(c.results.size()) + " results");
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) refs.define(c.results[i], std::move(outputs[i]));
  } catch (const KernelError& e) {
    poisonAll(c.results,
              failure(e.op().empty() ? c.kernel : e.op(), e.what(), c.origin.str(), e.traceback()));
  } catch (const std::exception& e) {
    poisonAll(c.results, failure(c.kernel, e.what(), c.origin.str()));
  }
}

LocalTensor Engine::Impl::onHost(const LocalTensor& tensor) {
  if (tensor.device().kind == DeviceKind::cpu) return tensor;
  auto device = findDeviceCollectives(tensor.device().kind);
  if (!device) {
    throw ConfigError(tensor.describe() +
                      " is on a GPU, and this build of crown cannot copy "
                      "it to the host (configure with CROWN_WITH_NCCL=ON)");
  }
  return device->toHost(tensor);
}

FetchReply Engine::Impl::fetch(RefId ref) const {
  FetchReply reply;
  auto value = refs.find(ref);
  if (!value) {
    reply.failure = *failure(
        "fetch", "ref " + std::to_string(ref) + " is not defined here (dropped, or never made)",
        "");
  } else if (auto* poison = std::get_if<RefTable::Poison>(&*value)) {
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

}  // namespace crown::tensor
