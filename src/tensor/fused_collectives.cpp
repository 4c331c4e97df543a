// Small allreduces in a row run as one (Collectives::fusable, runFused): a
// training step's gradients reduced one by one (p.grad.reduce_ for each
// parameter) cost one MPI allreduce and one agreement, not one of each per
// tensor, as DDP buckets its gradients.
#include <set>

#include "crown/actor/mpi_service.h"
#include "crown/common/error.h"
#include "tensor/collectives.h"

namespace crown::tensor::detail {
namespace {

// Whether two shards share memory (then the second must see the first's
// result, as run one after the other).
bool overlap(const LocalTensor& a, const LocalTensor& b) {
  auto extent = [](const LocalTensor& t) {
    std::int64_t last = 0;
    for (std::size_t d = 0; d < t.dims(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
    const auto* begin = static_cast<const std::byte*>(t.data());
    return std::pair(begin, begin + (last + 1) * static_cast<std::int64_t>(elementSize(t.dtype())));
  };
  if (a.numel() == 0 || b.numel() == 0) return false;
  auto [a0, a1] = extent(a);
  auto [b0, b1] = extent(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

std::size_t Collectives::fusable(const std::vector<Command>& commands, std::size_t first) {
  // The bytes of a command that may fuse: an allreduce whose source the
  // controller described (a CPU one, of a type MPI has); nothing otherwise.
  auto fusableBytes = [](const Collective& c) -> std::optional<std::int64_t> {
    if (c.kind != CollectiveKind::allreduce) return std::nullopt;
    return describedBytes(c);
  };
  const auto* head = std::get_if<Collective>(&commands[first]);
  if (!head) return 0;
  auto bytes = fusableBytes(*head);
  if (!bytes || *bytes > kOverlapBytes) return 0;
  std::set<RefId> touched{head->source, head->result};
  std::size_t count = 1;
  for (std::size_t i = first + 1; i < commands.size() && count < kMostFused; ++i, ++count) {
    const auto* next = std::get_if<Collective>(&commands[i]);
    if (!next) break;
    auto more = fusableBytes(*next);
    if (!more || *bytes + *more > kOverlapBytes || next->dims != head->dims ||
        next->reduction != head->reduction || next->expectType != head->expectType ||
        touched.count(next->source) || touched.count(next->result)) {
      break;
    }
    *bytes += *more;
    touched.insert(next->source);
    touched.insert(next->result);
  }
  return count;
}

std::vector<Collectives::Outcome> Collectives::runFused(
    const std::vector<Collective>& commands, const std::vector<const RefTable::Value*>& sources) {
  auto eachAlone = [&] {
    std::vector<Outcome> outcomes;
    for (std::size_t i = 0; i < commands.size(); ++i)
      outcomes.push_back(run(commands[i], sources[i]));
    return outcomes;
  };
  const Collective& head = commands.front();
  const Group* g = nullptr;
  try {
    g = &group(head.dims);
  } catch (const std::exception&) {
    return eachAlone();  // each fails the same way, alone
  }
  // This member's inputs: all good (defined, on the CPU, as recorded, apart
  // in memory), or it sends zeros and says so in the agreement.
  std::vector<LocalTensor> inputs;
  std::int64_t total = 0;
  for (const Collective& c : commands) total += elementCount(c.expectShape);
  bool good = true;
  for (std::size_t i = 0; i < commands.size() && good; ++i) {
    const auto* tensor = sources[i] ? std::get_if<LocalTensor>(sources[i]) : nullptr;
    good = tensor && tensor->device().kind == DeviceKind::cpu &&
           tensor->dtype() == commands[i].expectType &&
           tensor->numel() == elementCount(commands[i].expectShape);
    for (std::size_t j = 0; good && j < inputs.size(); ++j) good = !overlap(inputs[j], *tensor);
    if (good) inputs.push_back(*tensor);
  }
  // Zeros only for a member without good inputs; the others' are copied in.
  LocalTensor packed = good ? LocalTensor::allocate(head.expectType, {total})
                            : LocalTensor::zeros(head.expectType, {total});
  auto slice = [&](std::size_t i, std::int64_t offset) {
    return LocalTensor::wrap(head.expectType, commands[i].expectShape, {},
                             static_cast<std::byte*>(packed.data()) +
                                 offset * static_cast<std::int64_t>(elementSize(head.expectType)),
                             packed.owner());
  };
  if (good) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < commands.size(); ++i) {
      slice(i, offset).assign(inputs[i]);
      offset += inputs[i].numel();
    }
  }
  // The agreement as run() makes it, posted with the data.
  Facts agreed = facts(good, total, head.expectType);
  Posted posted;
  posted.out = packed;  // MPI may write it until the collective ends, failed or not
  auto failEach = [&](const std::string& message, const ProcessLost* lost) {
    keep(std::move(posted), {});
    std::vector<Outcome> outcomes;
    for (const Collective& c : commands) outcomes.push_back(failed(c, message, lost));
    return outcomes;
  };
  try {
    Future<void> agreement = agree(*g, agreed);
    posted.done = allreduceInPlace(*g, packed, head.reduction);
    agreement.get();
    posted.done.get();
  } catch (const ProcessLost& e) {
    return failEach(e.what(), &e);
  } catch (const std::exception& e) {
    return failEach(std::string("the members could not agree: ") + e.what(), nullptr);
  }
  if (agreed[0] != kNoFailure) return eachAlone();  // each finds out what failed, and where
  if (head.reduction == Reduction::avg) divideBy(packed, g->size);
  std::vector<Outcome> outcomes;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    LocalTensor result = slice(i, offset);  // a view of the packed block
    offset += result.numel();
    if (commands[i].result == commands[i].source) result = intoSource(inputs[i], result);
    outcomes.push_back(Outcome{std::move(result), nullptr});
  }
  return outcomes;
}

}  // namespace crown::tensor::detail
