// LocalTensor's memory, element types and the strided copies of
// contiguousCopy() and assign().
#include "crown/tensor/local_tensor.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>

#include "crown/common/error.h"
#include "crown/wire/payload.h"

namespace crown::tensor {
namespace {

// A tensor's own memory. A large one is a recycled wire buffer (payload.h),
// handed back when the tensor goes: an engine's result of a step reuses the
// last step's pages instead of faulting in fresh ones (issue 45), whatever
// malloc the process runs.
class Block : public Owner {
 public:
  virtual std::byte* data() = 0;
};

struct HeapBlock final : Block {
  explicit HeapBlock(std::size_t bytes) : memory(new std::byte[bytes == 0 ? 1 : bytes]) {}
  std::byte* data() override { return memory.get(); }
  std::unique_ptr<std::byte[]> memory;
};

struct RecycledBlock final : Block {
  explicit RecycledBlock(std::size_t bytes) { wire::sizeForOverwrite(buffer, bytes); }
  ~RecycledBlock() override { wire::recycle(std::move(buffer)); }
  std::byte* data() override { return reinterpret_cast<std::byte*>(buffer.data()); }
  wire::Bytes buffer;
};

std::shared_ptr<Block> newBlock(std::size_t bytes) {
  if (bytes >= wire::kRecycledBytes) return std::make_shared<RecycledBlock>(bytes);
  return std::make_shared<HeapBlock>(bytes);
}

struct NameOf {
  ScalarType type;
  const char* name;
  std::size_t size;
};
constexpr NameOf kTypes[] = {
    {ScalarType::boolean, "bool", 1}, {ScalarType::u8, "uint8", 1},
    {ScalarType::i8, "int8", 1},      {ScalarType::i16, "int16", 2},
    {ScalarType::i32, "int32", 4},    {ScalarType::i64, "int64", 8},
    {ScalarType::f16, "float16", 2},  {ScalarType::bf16, "bfloat16", 2},
    {ScalarType::f32, "float32", 4},  {ScalarType::f64, "float64", 8},
};

const NameOf& entry(ScalarType type) {
  for (const auto& e : kTypes)
    if (e.type == type) return e;
  throw ProtocolError("unknown tensor element type " + std::to_string(static_cast<int>(type)));
}

// Visits every element offset (in elements) of a strided layout, row-major.
template <class Fn>
void forEachOffset(const std::vector<std::int64_t>& shape,
                   const std::vector<std::int64_t>& strides, Fn fn) {
  std::int64_t count = elementCount(shape);
  if (count == 0) return;
  std::vector<std::int64_t> index(shape.size(), 0);
  std::int64_t offset = 0;
  for (std::int64_t n = 0; n < count; ++n) {
    fn(offset);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace

std::size_t elementSize(ScalarType type) { return entry(type).size; }
const char* scalarName(ScalarType type) { return entry(type).name; }

ScalarType scalarFromName(const std::string& name) {
  std::string known;
  for (const auto& e : kTypes) {
    if (name == e.name) return e.type;
    known += std::string(known.empty() ? "" : ", ") + e.name;
  }
  throw ConfigError("unknown tensor element type '" + name + "' (known: " + known + ")");
}

bool isFloating(ScalarType type) {
  return type == ScalarType::f16 || type == ScalarType::bf16 || type == ScalarType::f32 ||
         type == ScalarType::f64;
}

DType mpiType(ScalarType type) {
  switch (type) {
    case ScalarType::u8: return DType::u8;
    case ScalarType::i8: return DType::i8;
    case ScalarType::i32: return DType::i32;
    case ScalarType::i64: return DType::i64;
    case ScalarType::f32: return DType::f32;
    case ScalarType::f64: return DType::f64;
    default: break;
  }
  throw ConfigError(std::string("collectives over MPI have no ") + scalarName(type) +
                    " type: convert the tensor to float32 (or int64) first, or use GPU "
                    "tensors, whose collectives go over NCCL");
}

std::int64_t elementCount(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (std::int64_t size : shape) {
    if (size < 0) throw ConfigError("a tensor size is negative: " + std::to_string(size));
    count *= size;
  }
  return count;
}

std::vector<std::int64_t> contiguousStrides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return strides;
}

LocalTensor LocalTensor::allocate(ScalarType type, std::vector<std::int64_t> shape) {
  std::size_t bytes = static_cast<std::size_t>(elementCount(shape)) * elementSize(type);
  std::shared_ptr<Block> block;
  try {
    block = newBlock(bytes);
  } catch (const std::bad_alloc&) {
    LocalTensor described;
    described.dtype_ = type;
    described.layout_ = layoutOf(shape, {});
    throw Error("out of memory: cannot allocate " + std::to_string(bytes) + " bytes for " +
                described.describe());
  }
  void* data = block->data();
  auto strides = contiguousStrides(shape);
  return wrap(type, std::move(shape), std::move(strides), data, std::move(block));
}

LocalTensor LocalTensor::zeros(ScalarType type, std::vector<std::int64_t> shape) {
  LocalTensor tensor = allocate(type, std::move(shape));
  std::memset(tensor.data(), 0, tensor.nbytes());
  return tensor;
}

LocalTensor LocalTensor::wrap(ScalarType type, std::vector<std::int64_t> shape,
                              std::vector<std::int64_t> strides, void* data,
                              std::shared_ptr<Owner> owner, Device device) {
  if (strides.empty()) strides = contiguousStrides(shape);
  return wrapStrided(type, shape, strides, data, std::move(owner), device);
}

LocalTensor LocalTensor::wrapStrided(ScalarType type, std::span<const std::int64_t> shape,
                                     std::span<const std::int64_t> strides, void* data,
                                     std::shared_ptr<Owner> owner, Device device) {
  CROWN_CHECK(owner != nullptr, "LocalTensor::wrap needs an owner of the memory");
  CROWN_CHECK(strides.size() == shape.size(), "LocalTensor::wrap: " +
                                                  std::to_string(strides.size()) + " strides for " +
                                                  std::to_string(shape.size()) + " dimensions");
  for (std::int64_t size : shape)
    if (size < 0) throw ConfigError("a tensor size is negative: " + std::to_string(size));
  LocalTensor tensor;
  tensor.dtype_ = type;
  tensor.layout_ = layoutOf(shape, strides);
  tensor.device_ = device;
  tensor.data_ = data;
  tensor.owner_ = std::move(owner);
  return tensor;
}

// This thread's last few layouts, looked up before a new one is made: a
// loop's results take the layout of the step before (a shared pointer's
// count, no allocation). Few, so a miss costs a few comparisons.
std::shared_ptr<const LocalTensor::Layout> LocalTensor::layoutOf(
    std::span<const std::int64_t> shape, std::span<const std::int64_t> strides) {
  constexpr std::size_t kRecent = 8;
  thread_local std::array<std::shared_ptr<const Layout>, kRecent> recent;
  thread_local std::size_t next = 0;
  for (const auto& layout : recent) {
    if (layout && std::ranges::equal(layout->shape, shape) &&
        std::ranges::equal(layout->strides, strides))
      return layout;
  }
  auto made = std::make_shared<const Layout>(
      Layout{{shape.begin(), shape.end()}, {strides.begin(), strides.end()}});
  recent[next++ % kRecent] = made;
  return made;
}

std::int64_t LocalTensor::numel() const { return elementCount(shape()); }

bool LocalTensor::contiguous() const {
  const auto& sizes = shape();
  const auto& steps = strides();
  std::int64_t want = 1;  // contiguousStrides(), from the last dimension, without a vector
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && steps[d] != want) return false;
    want *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return true;
}

std::string LocalTensor::describe() const {
  std::string text = std::string(scalarName(dtype_)) + "[";
  for (std::size_t d = 0; d < dims(); ++d) text += (d ? ", " : "") + std::to_string(shape()[d]);
  return text + "]";
}

double LocalTensor::item() const {
  if (numel() != 1) throw ConfigError("item() of a tensor of " + describe() + ": it has " +
                                      std::to_string(numel()) + " elements, not one");
  LocalTensor one = contiguousCopy();
  switch (dtype_) {
    case ScalarType::boolean: return *one.data<bool>() ? 1 : 0;
    case ScalarType::u8: return *one.data<std::uint8_t>();
    case ScalarType::i8: return *one.data<std::int8_t>();
    case ScalarType::i16: return *one.data<std::int16_t>();
    case ScalarType::i32: return *one.data<std::int32_t>();
    case ScalarType::i64: return static_cast<double>(*one.data<std::int64_t>());
    case ScalarType::f32: return *one.data<float>();
    case ScalarType::f64: return *one.data<double>();
    default: break;
  }
  throw ConfigError(std::string("item() of a ") + scalarName(dtype_) + " tensor");
}

LocalTensor LocalTensor::contiguousCopy() const {
  CROWN_CHECK(device_.kind == DeviceKind::cpu, "contiguousCopy of a tensor that is not on the CPU");
  if (contiguous()) return *this;
  LocalTensor out = allocate(dtype_, shape());
  std::size_t size = elementSize(dtype_);
  auto* to = static_cast<std::byte*>(out.data());
  const auto* from = static_cast<const std::byte*>(data_);
  forEachOffset(shape(), strides(), [&](std::int64_t offset) {
    std::memcpy(to, from + offset * static_cast<std::int64_t>(size), size);
    to += size;
  });
  return out;
}

LocalTensor LocalTensor::clone() const {
  if (!contiguous()) return contiguousCopy();  // a fresh block already
  CROWN_CHECK(device_.kind == DeviceKind::cpu, "clone of a tensor that is not on the CPU");
  LocalTensor out = allocate(dtype_, shape());
  std::memcpy(out.data(), data_, nbytes());
  return out;
}

void LocalTensor::assign(const LocalTensor& from) {
  CROWN_CHECK(from.dtype_ == dtype_ && from.numel() == numel() && from.contiguous(),
              "assign of " + from.describe() + " to " + describe());
  if (contiguous()) {
    if (from.data_ != data_) std::memmove(data_, from.data_, nbytes());
    return;
  }
  std::size_t size = elementSize(dtype_);
  const auto* source = static_cast<const std::byte*>(from.data_);
  auto* to = static_cast<std::byte*>(data_);
  forEachOffset(shape(), strides(), [&](std::int64_t offset) {
    std::memcpy(to + offset * static_cast<std::int64_t>(size), source, size);
    source += size;
  });
}

TensorData toData(const LocalTensor& tensor) {
  LocalTensor dense = tensor.contiguousCopy();
  TensorData data{dense.dtype(), dense.shape(), {}};
  data.bytes.assign(static_cast<const char*>(dense.data()), dense.nbytes());
  return data;
}

LocalTensor fromData(TensorData data) {
  LocalTensor tensor = LocalTensor::allocate(data.dtype, data.shape);
  if (data.bytes.size() != tensor.nbytes()) {
    throw ProtocolError("a fetched " + tensor.describe() + " came with " +
                        std::to_string(data.bytes.size()) + " bytes, not " +
                        std::to_string(tensor.nbytes()));
  }
  std::memcpy(tensor.data(), data.bytes.data(), data.bytes.size());
  return tensor;
}

}  // namespace crown::tensor
