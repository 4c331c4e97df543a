// Collective commands over MPI: the agreement step, then the data.
#include "tensor/collectives.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>

#include "crown/actor/mpi_service.h"
#include "crown/common/error.h"
#include "crown/tensor/device_collectives.h"

namespace crown::tensor::detail {

ReduceOp mpiReduce(Reduction reduction) {
  switch (reduction) {
    case Reduction::sum:
    case Reduction::avg:
      return ReduceOp::sum;
    case Reduction::min:
      return ReduceOp::min;
    case Reduction::max:
      return ReduceOp::max;
    case Reduction::product:
      return ReduceOp::prod;
  }
  return ReduceOp::sum;
}

void divideBy(LocalTensor& tensor, std::size_t count) {
  auto n = tensor.numel();
  switch (tensor.dtype()) {
#define CROWN_DIVIDE(type, T)                                                            \
  case ScalarType::type:                                                                 \
    for (std::int64_t i = 0; i < n; ++i)                                                 \
      tensor.data<T>()[i] = static_cast<T>(tensor.data<T>()[i] / static_cast<T>(count)); \
    return;
    CROWN_DIVIDE(u8, std::uint8_t)
    CROWN_DIVIDE(i8, std::int8_t)
    CROWN_DIVIDE(i32, std::int32_t)
    CROWN_DIVIDE(i64, std::int64_t)
    CROWN_DIVIDE(f32, float)
    CROWN_DIVIDE(f64, double)
#undef CROWN_DIVIDE
    default:
      throw ConfigError(std::string("avg of ") + scalarName(tensor.dtype()));
  }
}

Collectives::Collectives(Proc& proc, const mesh::Shape& shape, std::uint32_t instance)
    : proc_(proc), shape_(shape), instance_(instance) {
  try {
    proc.mpi();
  } catch (const Error&) {
    unavailable_ = "this process has no MPI (simulated procs)";
    return;
  }
  // Every set of dimensions, now, while every engine starts together: the
  // groups are made collectively (over their members) and block, so making
  // one later would wait on whichever member is slow or lost.
  std::size_t dims = shape.dims();
  if (dims > 4) return;  // 2^dims sets would be too many: made on first use instead
  for (std::size_t set = 1; set < (std::size_t{1} << dims); ++set) {
    std::vector<std::string> labels;
    for (std::size_t d = 0; d < dims; ++d)
      if (set & (std::size_t{1} << d)) labels.push_back(shape.labels()[d]);
    group(labels);
  }
}

const Collectives::Group& Collectives::group(const std::vector<std::string>& dims) {
  if (!unavailable_.empty()) throw ConfigError(unavailable_);
  if (dims.empty()) throw ConfigError("a collective needs at least one mesh dimension");
  std::vector<std::size_t> indices;
  for (const std::string& label : dims) {
    if (!shape_.hasDim(label)) {
      std::string known;
      for (const auto& l : shape_.labels()) known += (known.empty() ? "" : ", ") + l;
      throw ConfigError("the mesh has no dimension '" + label + "' (its dimensions: " + known +
                        ")");
    }
    indices.push_back(shape_.dim(label));
  }
  std::sort(indices.begin(), indices.end());
  if (std::adjacent_find(indices.begin(), indices.end()) != indices.end())
    throw ConfigError("a collective names one mesh dimension twice");
  if (auto it = groups_.find(indices); it != groups_.end()) return it->second;
  // The members: the mesh's ranks that share this rank's coordinates outside
  // `dims`, in row-major order of the mesh (so, of their coordinates in dims).
  auto mine = shape_.coordinates(proc_.rank());
  Group made;
  for (std::size_t rank : shape_.ranks()) {
    auto theirs = shape_.coordinates(rank);
    bool same = true;
    for (const auto& [label, index] : mine) {
      bool inside = std::find(dims.begin(), dims.end(), label) != dims.end();
      if (!inside && theirs.at(label) != index) same = false;
    }
    if (same) made.members.push_back(static_cast<Rank>(rank));
  }
  made.size = made.members.size();
  // Making a communicator waits for every member (MPI_Comm_create_group
  // cannot be abandoned): with one known lost, fail now instead of holding
  // the service thread for good. A member lost during the making still
  // hangs it: MPI gives no way out of that.
  for (Rank member : made.members) {
    if (!proc_.alive(member)) {
      throw ProcessLost(member, proc_.host(member),
                        "lost before the communicator over these dimensions was made");
    }
  }
  // Over the members only (MPI_Comm_create_group): a mesh need not hold the
  // whole launch, so a mesh of the survivors of a lost rank reduces again.
  made.comm = proc_.mpi().commOfRanks(made.members, instance_);
  return groups_.emplace(indices, std::move(made)).first->second;
}

Collectives::Outcome Collectives::failed(const Collective& command, std::string message,
                                         const ProcessLost* lost) const {
  Failure f{collectiveName(command.kind), proc_.rank(), std::move(message), {}, command.origin};
  if (lost) {  // the front end raises it as a lost process (Python's SupervisionError)
    f.rankLost = true;
    f.lostRank = lost->rank();
  }
  return Outcome{{}, std::make_shared<const Failure>(std::move(f))};
}

Collectives::Outcome Collectives::run(const Collective& command, const RefTable::Value* source) {
  auto fail = [&](std::string message) { return failed(command, std::move(message)); };
  auto lost = [&](const ProcessLost& e) { return failed(command, e.what(), &e); };
  const Group* g = nullptr;
  try {
    g = &group(command.dims);  // the same answer on every member: no agreement needed
  } catch (const ProcessLost& e) {
    return lost(e);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  // What this member brings: a tensor, or why not.
  RefTable::Poison local;
  LocalTensor input;
  if (!source) {
    local =
        fail("its input (ref " + std::to_string(command.source) + ") is not defined here").failure;
  } else if (auto* poison = std::get_if<RefTable::Poison>(source)) {
    local = *poison;
  } else {
    input = std::get<LocalTensor>(*source);
    try {
      if (input.device().kind == DeviceKind::cpu) {
        mpiType(input.dtype());
      } else if (!findDeviceCollectives(input.device().kind)) {
        throw ConfigError(input.describe() +
                          " is on a GPU, and this build of crown has no GPU "
                          "collectives (configure with CROWN_WITH_NCCL=ON)");
      }
      bool blocks =
          command.kind == CollectiveKind::reduceScatter || command.kind == CollectiveKind::alltoall;
      if (blocks && (input.dims() == 0 || input.shape()[0] % static_cast<std::int64_t>(g->size))) {
        throw ConfigError(std::string(collectiveName(command.kind)) + " of " + input.describe() +
                          ": dimension 0 must split evenly into " + std::to_string(g->size) +
                          " blocks, one per member");
      }
      if (command.kind == CollectiveKind::broadcast &&
          (command.root < 0 || command.root >= static_cast<std::int64_t>(g->size))) {
        throw ConfigError("broadcast from member " + std::to_string(command.root) +
                          " of a group of " + std::to_string(g->size));
      }
    } catch (const std::exception& e) {
      local = fail(e.what()).failure;
    }
  }
  // The agreement: the lowest member whose input failed, and the extremes of
  // the element counts and types.
  std::int64_t me = static_cast<std::int64_t>(proc_.rank());
  Facts agreed = facts(!local, input.numel(), input.dtype());
  MpiService& mpi = proc_.mpi();
  // A small CPU collective whose source the controller described moves its
  // data while the members agree: both are posted now, in this order on
  // every member (the choice rests on the command alone, the same
  // everywhere), so the agreement's round trip overlaps the data's instead
  // of preceding it. A member without a good input sends zeros of the
  // expected shape, and every member drops the data if the agreement finds
  // a failure; the data goes into fresh memory (or, for reduce_, straight
  // into the source, whose ref a failure poisons: inPlace).
  std::optional<Posted> early;
  LocalTensor stand;  // what a member without a good input sends
  if (overlaps(command, g->size)) {
    // What the counts rest on must be as recorded: the type and the element
    // count (and, where the data goes in blocks of dimension 0, the shape).
    bool blocks =
        command.kind == CollectiveKind::reduceScatter || command.kind == CollectiveKind::alltoall;
    if (!local && (input.device().kind != DeviceKind::cpu || input.dtype() != command.expectType ||
                   input.numel() != elementCount(command.expectShape) ||
                   (blocks && input.shape() != command.expectShape))) {
      std::string recorded = scalarName(command.expectType);
      for (std::size_t i = 0; i < command.expectShape.size(); ++i)
        recorded += (i ? ", " : "[") + std::to_string(command.expectShape[i]);
      recorded += command.expectShape.empty() ? "[]" : "]";
      local = fail("its input here is " + input.describe() + ", not the " + recorded +
                   " it was recorded as")
                  .failure;
      agreed = facts(false, 0, input.dtype());
    }
    if (local) stand = LocalTensor::zeros(command.expectType, command.expectShape);
  }
  try {
    Future<void> agreement = agree(*g, agreed);
    if (overlaps(command, g->size)) {
      if (!local && inPlace(command, input)) {
        early = Posted{allreduceInPlace(*g, input, command.reduction), input, {}};
      } else {
        early = post(command, *g, local ? stand : input);
      }
    }
    agreement.get();
    if (early) early->done.get();
  } catch (const ProcessLost& e) {
    if (early) keep(std::move(*early), stand);
    return lost(e);
  } catch (const std::exception& e) {
    if (early) keep(std::move(*early), stand);
    return fail(std::string("the members could not agree: ") + e.what());
  }
  if (agreed[0] != kNoFailure) {
    // The root cause, from the lowest member that has one, to the others.
    Rank root = static_cast<Rank>(agreed[0]);
    auto index = static_cast<Rank>(std::find(g->members.begin(), g->members.end(), root) -
                                   g->members.begin());
    std::string cause(1024, '\0');
    if (agreed[0] == me) {
      std::string text = local->describe();
      std::memcpy(cause.data(), text.data(), std::min(text.size(), cause.size() - 1));
    }
    try {
      mpi.broadcast(g->comm, cause.data(), cause.size(), index).get();
    } catch (const std::exception&) {
      cause.clear();
    }
    if (local) return Outcome{{}, local};  // this member's own cause says more
    cause.resize(std::strlen(cause.c_str()));
    return fail("the input on rank " + std::to_string(root) + " failed: " + cause);
  }
  if (agreed[1] != -agreed[2] || agreed[3] != -agreed[4]) {
    return fail("the members' inputs differ: from " + std::to_string(agreed[1]) + " to " +
                std::to_string(-agreed[2]) + " elements" +
                (agreed[3] != -agreed[4] ? ", and of different types" : ""));
  }
  try {
    if (early) return Outcome{finish(command, *g, input, std::move(early->out)), nullptr};
    return Outcome{move(command, *g, input), nullptr};
  } catch (const ProcessLost& e) {
    return lost(e);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

LocalTensor Collectives::move(const Collective& command, const Group& g, const LocalTensor& input) {
  MpiService& mpi = proc_.mpi();
  if (input.device().kind != DeviceKind::cpu) {
    auto index = static_cast<std::size_t>(
        std::find(g.members.begin(), g.members.end(), proc_.rank()) - g.members.begin());
    return findDeviceCollectives(input.device().kind)
        ->run(command,
              CollectiveGroup{mpi, g.comm, g.members, index,
                              [this](Rank member) { return proc_.alive(member); }},
              input);
  }
  // In place when the command says so and the memory allows: then every
  // view of the source sees the result too, as torch's in-place ops do.
  if (inPlace(command, input)) {
    allreduceInPlace(g, input, command.reduction).get();
    LocalTensor result = input;  // the same memory
    if (command.reduction == Reduction::avg) divideBy(result, g.size);
    return result;
  }
  Posted posted = post(command, g, input);
  posted.done.get();
  return finish(command, g, input, std::move(posted.out));
}

bool Collectives::inPlace(const Collective& command, const LocalTensor& input) {
  return command.kind == CollectiveKind::allreduce && command.result == command.source &&
         input.device().kind == DeviceKind::cpu && input.contiguous();
}

std::optional<std::int64_t> Collectives::describedBytes(const Collective& command) {
  if (!command.expected) return std::nullopt;
  try {
    mpiType(command.expectType);
  } catch (const std::exception&) {
    return std::nullopt;  // no MPI type: the agreement first, which says so on every member
  }
  return elementCount(command.expectShape) *
         static_cast<std::int64_t>(elementSize(command.expectType));
}

bool Collectives::overlaps(const Collective& command, std::size_t members) {
  const auto& shape = command.expectShape;
  auto size = static_cast<std::int64_t>(members);
  bool blocks =
      command.kind == CollectiveKind::reduceScatter || command.kind == CollectiveKind::alltoall;
  if (blocks && (shape.empty() || shape[0] % size != 0)) return false;
  if (command.kind == CollectiveKind::broadcast && (command.root < 0 || command.root >= size))
    return false;
  auto bytes = describedBytes(command);
  return bytes && *bytes <= kOverlapBytes;
}

void Collectives::keep(Posted posted, LocalTensor stand) {
  // MPI may still write a failed collective's buffers (it cannot cancel it).
  abandoned_.push_back(std::move(posted.out));
  abandoned_.push_back(std::move(posted.send));
  abandoned_.push_back(std::move(stand));
}

Collectives::Posted Collectives::post(const Collective& command, const Group& g,
                                      const LocalTensor& input) {
  MpiService& mpi = proc_.mpi();
  auto members = static_cast<std::int64_t>(g.size);
  DType type = mpiType(input.dtype());
  Posted p;
  switch (command.kind) {
    case CollectiveKind::allreduce:
      p.out = input.clone();
      p.done = allreduceInPlace(g, p.out, command.reduction);
      return p;
    case CollectiveKind::reduceScatter: {
      auto shape = input.shape();
      shape[0] /= members;
      p.send = input.contiguousCopy();
      p.out = LocalTensor::allocate(input.dtype(), shape);
      p.done = mpi.reduceScatter(g.comm, p.send.data(), p.out.data(),
                                 static_cast<std::size_t>(p.out.numel()), type,
                                 mpiReduce(command.reduction));
      return p;
    }
    case CollectiveKind::allgather: {
      auto shape = input.shape();
      shape.insert(shape.begin(), members);
      p.send = input.contiguousCopy();
      p.out = LocalTensor::allocate(input.dtype(), shape);
      p.done = mpi.allgather(g.comm, p.send.data(), p.out.data(), p.send.nbytes());
      return p;
    }
    case CollectiveKind::alltoall:
      p.send = input.contiguousCopy();
      p.out = LocalTensor::allocate(input.dtype(), input.shape());
      p.done = mpi.alltoall(g.comm, p.send.data(), p.out.data(), p.send.nbytes() / g.size);
      return p;
    case CollectiveKind::broadcast:
      p.out = input.clone();
      p.done = mpi.broadcast(g.comm, p.out.data(), p.out.nbytes(), static_cast<Rank>(command.root));
      return p;
  }
  throw ConfigError("unknown collective");
}

LocalTensor Collectives::finish(const Collective& command, const Group& g, const LocalTensor& input,
                                LocalTensor out) {
  bool reduces =
      command.kind == CollectiveKind::allreduce || command.kind == CollectiveKind::reduceScatter;
  if (reduces && command.reduction == Reduction::avg) divideBy(out, g.size);
  if (command.kind == CollectiveKind::allreduce && command.result == command.source)
    return intoSource(input, out);
  return out;
}

LocalTensor Collectives::intoSource(const LocalTensor& source, const LocalTensor& result) {
  LocalTensor target = source;
  if (result.data() != target.data()) target.assign(result);
  return target;
}

Collectives::Facts Collectives::facts(bool good, std::int64_t count, ScalarType type) const {
  if (!good) return {static_cast<std::int64_t>(proc_.rank()), kNoFailure, kNoFailure, kNoFailure,
                     kNoFailure};
  auto t = static_cast<std::int64_t>(type);
  return {kNoFailure, count, -count, t, -t};
}

Future<void> Collectives::agree(const Group& g, Facts& facts) {
  return proc_.mpi().allreduce(g.comm, facts.data(), facts.size(), DType::i64, ReduceOp::min);
}

Future<void> Collectives::allreduceInPlace(const Group& g, const LocalTensor& tensor,
                                           Reduction reduction) {
  return proc_.mpi().allreduce(g.comm, tensor.data(), static_cast<std::size_t>(tensor.numel()),
                               mpiType(tensor.dtype()), mpiReduce(reduction));
}

}  // namespace crown::tensor::detail
