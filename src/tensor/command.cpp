// Names of collectives and reductions, and a Failure's message.
#include "crown/tensor/command.h"

namespace crown::tensor {

const char* collectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::allreduce: return "allreduce";
    case CollectiveKind::reduceScatter: return "reduce_scatter";
    case CollectiveKind::allgather: return "allgather";
    case CollectiveKind::alltoall: return "all_to_all";
    case CollectiveKind::broadcast: return "broadcast";
  }
  return "collective";
}

namespace {
constexpr std::pair<Reduction, const char*> kReductions[] = {
    {Reduction::sum, "sum"}, {Reduction::avg, "avg"},         {Reduction::min, "min"},
    {Reduction::max, "max"}, {Reduction::product, "product"},
};
}  // namespace

const char* reductionName(Reduction reduction) {
  for (auto [r, name] : kReductions)
    if (r == reduction) return name;
  return "reduction";
}

Reduction reductionFromName(const std::string& name) {
  for (auto [r, known] : kReductions)
    if (name == known) return r;
  throw ConfigError("unknown reduction '" + name + "': use sum, avg, min, max or product");
}

std::string Failure::describe() const {
  std::string text = op + " failed on rank " + std::to_string(rank);
  if (!origin.empty()) text += " (issued at " + origin + ")";
  return text + ": " + message;
}

}  // namespace crown::tensor
