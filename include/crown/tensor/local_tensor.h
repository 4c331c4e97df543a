// LocalTensor: one rank's shard of a distributed tensor, as the engine holds
// it in its ref table: element type, shape, strides (in elements), device,
// and memory kept alive by an Owner (the engine's own heap block, or a front
// end's object such as a torch tensor). A value type: copies share memory,
// like torch's tensors. Thread-compatible: the engine's stream that holds it
// is the only one that writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "crown/actor/mpi_service.h"  // DType, for collectives

namespace crown::tensor {

/// Element types, torch's names in comments.
enum class ScalarType : std::uint8_t {
  boolean,  // torch.bool
  u8,       // torch.uint8
  i8,       // torch.int8
  i16,      // torch.int16
  i32,      // torch.int32
  i64,      // torch.int64
  f16,      // torch.float16
  bf16,     // torch.bfloat16
  f32,      // torch.float32
  f64,      // torch.float64
};

std::size_t elementSize(ScalarType type);
/// torch's name without "torch.": "float32", "int64", "bool", ...
const char* scalarName(ScalarType type);
/// The inverse of scalarName; throws ConfigError naming the known ones.
ScalarType scalarFromName(const std::string& name);
/// The MPI service's type of `type`; throws ConfigError for the types MPI
/// has none of (bool, float16, bfloat16), saying what to do instead.
DType mpiType(ScalarType type);
bool isFloating(ScalarType type);

enum class DeviceKind : std::uint8_t { cpu, cuda };
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

/// Keeps a tensor's memory alive. Front ends derive their own: Python's
/// holds the torch tensor, so that handing it back costs nothing.
struct Owner {
  virtual ~Owner() = default;
};

class LocalTensor {
 public:
  LocalTensor() = default;
  /// A new contiguous CPU tensor, its elements not yet set. Throws
  /// crown::Error naming the size when the memory is not there.
  static LocalTensor allocate(ScalarType type, std::vector<std::int64_t> shape);
  /// allocate(), every byte zero.
  static LocalTensor zeros(ScalarType type, std::vector<std::int64_t> shape);
  /// Memory that `owner` keeps alive; strides in elements (empty: contiguous).
  static LocalTensor wrap(ScalarType type, std::vector<std::int64_t> shape,
                          std::vector<std::int64_t> strides, void* data,
                          std::shared_ptr<Owner> owner, Device device = {});
  /// wrap() for a front end whose sizes live elsewhere (ATen's): strides
  /// given, one per dimension. Makes no vector when a tensor of the same
  /// shape and strides was made on this thread lately (an engine's loop
  /// makes the same few, op after op).
  static LocalTensor wrapStrided(ScalarType type, std::span<const std::int64_t> shape,
                                 std::span<const std::int64_t> strides, void* data,
                                 std::shared_ptr<Owner> owner, Device device = {});

  bool defined() const { return owner_ != nullptr; }
  ScalarType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return layout().shape; }
  const std::vector<std::int64_t>& strides() const { return layout().strides; }
  const Device& device() const { return device_; }
  std::size_t dims() const { return layout().shape.size(); }
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * elementSize(dtype_); }
  bool contiguous() const;
  void* data() const { return data_; }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  const std::shared_ptr<Owner>& owner() const { return owner_; }
  /// "float32[1024, 1024]".
  std::string describe() const;
  /// The only element of a one-element tensor, as a double (throws otherwise).
  double item() const;

  /// A contiguous copy (CPU), or this tensor itself when it is contiguous.
  LocalTensor contiguousCopy() const;
  /// A contiguous copy (CPU) that shares no memory with this tensor.
  LocalTensor clone() const;
  /// Writes `from` (same type and element count, contiguous) into this
  /// tensor's elements, following its strides.
  void assign(const LocalTensor& from);

 private:
  // Shape and strides, never changed once made: copies of a tensor share
  // them, and so do the tensors of one thread's recent layouts (interned),
  // so that neither a copy (an engine's lookup of its input) nor a new
  // result of a known shape allocates (issue 45).
  struct Layout {
    std::vector<std::int64_t> shape, strides;
  };
  inline static const Layout kNoDims{};  // a tensor's with no layout (empty, or moved from)
  static std::shared_ptr<const Layout> layoutOf(std::span<const std::int64_t> shape,
                                                std::span<const std::int64_t> strides);
  const Layout& layout() const { return layout_ ? *layout_ : kNoDims; }

  ScalarType dtype_ = ScalarType::f32;
  std::shared_ptr<const Layout> layout_;
  Device device_;
  void* data_ = nullptr;
  std::shared_ptr<Owner> owner_;
};

/// Row-major strides of `shape`, in elements.
std::vector<std::int64_t> contiguousStrides(const std::vector<std::int64_t>& shape);
/// The product of the sizes; throws ConfigError for a negative size.
std::int64_t elementCount(const std::vector<std::int64_t>& shape);

/// A shard on the wire (fetch): type, shape and the contiguous bytes.
struct TensorData {
  ScalarType dtype = ScalarType::f32;
  std::vector<std::int64_t> shape;
  std::string bytes;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& dtype& shape& bytes;
  }
};
TensorData toData(const LocalTensor& tensor);
/// Throws ProtocolError when the bytes do not fit the shape.
LocalTensor fromData(TensorData data);

}  // namespace crown::tensor
