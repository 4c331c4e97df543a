// How crown's tensor types map onto NCCL's (nccl_collectives.h): element
// types, reductions, and the shape of each collective's result. Pure
// functions, tested without a GPU (tests/unit/cuda/nccl_collectives_test.cpp).
#include "cuda/nccl_collectives.h"

#include <string>

#include "crown/common/error.h"

namespace crown::cuda {

using tensor::CollectiveKind;
using tensor::Reduction;
using tensor::ScalarType;

namespace detail {

std::optional<ncclDataType_t> ncclType(ScalarType type) {
  switch (type) {
    case ScalarType::i8:
      return ncclInt8;
    case ScalarType::u8:
      return ncclUint8;
    case ScalarType::i32:
      return ncclInt32;
    case ScalarType::i64:
      return ncclInt64;
    case ScalarType::f16:
      return ncclFloat16;
    case ScalarType::bf16:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      return ncclBfloat16;
#else
      return std::nullopt;
#endif
    case ScalarType::f32:
      return ncclFloat32;
    case ScalarType::f64:
      return ncclFloat64;
    case ScalarType::boolean:
    case ScalarType::i16:
      return std::nullopt;
  }
  return std::nullopt;
}

NcclReduction ncclReduction(Reduction reduction, int version) {
  switch (reduction) {
    case Reduction::sum:
      return {ncclSum, false};
    case Reduction::min:
      return {ncclMin, false};
    case Reduction::max:
      return {ncclMax, false};
    case Reduction::product:
      return {ncclProd, false};
    case Reduction::avg:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      // ncclAvg divides as the CPU path does: floating types exactly
      // (premultiplied by 1/n), integers by integer division of the sum.
      if (version >= NCCL_VERSION(2, 10, 0)) return {ncclAvg, false};
#endif
      (void)version;
      return {ncclSum, true};
  }
  throw ConfigError("unknown reduction " + std::to_string(static_cast<int>(reduction)));
}

std::vector<std::int64_t> resultShape(CollectiveKind kind, std::vector<std::int64_t> shape,
                                      std::size_t members) {
  auto n = static_cast<std::int64_t>(members);
  switch (kind) {
    case CollectiveKind::reduceScatter:
      CROWN_CHECK(!shape.empty() && shape[0] % n == 0,
                  "reduceScatter: dimension 0 must split evenly into the members");
      shape[0] /= n;
      break;
    case CollectiveKind::allgather:
      shape.insert(shape.begin(), n);
      break;
    case CollectiveKind::allreduce:
    case CollectiveKind::alltoall:
    case CollectiveKind::broadcast:
      break;
  }
  return shape;
}

}  // namespace detail

}  // namespace crown::cuda
