#include "aten_tensor.h"

#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <memory>
#include <new>
#include <utility>

namespace crown::python::aten {

using tensor::ScalarType;

namespace {

// Each thread's freed blocks of one type (T), reused by its next allocation:
// an AtenOwner and its shared_ptr count are one block made per op, and a
// malloc and a free each was a fifth of an engine's per-op allocations under
// glibc (issue 45). A block goes to the list of the thread that frees it
// (mostly the stream that made it, which also deletes the ref); a list
// keeps at most kKept, and is freed when its thread ends. The list runs
// through the blocks themselves, so its thread-local state is plain
// pointers, valid until the thread is gone.
template <class T>
class Recycling {
 public:
  using value_type = T;
  Recycling() = default;
  template <class U>
  Recycling(const Recycling<U>&) {}  // NOLINT: rebinding, as allocators do

  T* allocate(std::size_t n) {
    if (n == 1 && head_ != nullptr) {
      Free* block = head_;
      head_ = block->next;
      --count_;
      return reinterpret_cast<T*>(block);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) {
    if (n == 1 && !exited_ && count_ < kKept) {
      if (count_++ == 0) reapAtExit();
      head_ = new (p) Free{head_};
      return;
    }
    ::operator delete(p);
  }
  template <class U>
  bool operator==(const Recycling<U>&) const {
    return true;
  }

 private:
  static_assert(sizeof(T) >= sizeof(void*) && alignof(T) >= alignof(void*));
  struct Free {
    Free* next;
  };
  static void reapAtExit() {  // made once per thread: frees its list when the thread ends
    static thread_local Reaper reaper;
    (void)reaper;
  }
  struct Reaper {
    ~Reaper() {
      exited_ = true;
      while (head_ != nullptr) ::operator delete(std::exchange(head_, head_->next));
      count_ = 0;
    }
  };
  static constexpr std::size_t kKept = 256;
  static inline thread_local Free* head_ = nullptr;
  static inline thread_local std::size_t count_ = 0;
  static inline thread_local bool exited_ = false;
};

}  // namespace

at::ScalarType atenType(ScalarType type) {
  switch (type) {
    case ScalarType::boolean: return at::kBool;
    case ScalarType::u8: return at::kByte;
    case ScalarType::i8: return at::kChar;
    case ScalarType::i16: return at::kShort;
    case ScalarType::i32: return at::kInt;
    case ScalarType::i64: return at::kLong;
    case ScalarType::f16: return at::kHalf;
    case ScalarType::bf16: return at::kBFloat16;
    case ScalarType::f32: return at::kFloat;
    case ScalarType::f64: return at::kDouble;
  }
  TORCH_CHECK(false, "unknown crown scalar type ", static_cast<int>(type));
}

std::optional<ScalarType> crownType(at::ScalarType type) {
  switch (type) {
    case at::kBool: return ScalarType::boolean;
    case at::kByte: return ScalarType::u8;
    case at::kChar: return ScalarType::i8;
    case at::kShort: return ScalarType::i16;
    case at::kInt: return ScalarType::i32;
    case at::kLong: return ScalarType::i64;
    case at::kHalf: return ScalarType::f16;
    case at::kBFloat16: return ScalarType::bf16;
    case at::kFloat: return ScalarType::f32;
    case at::kDouble: return ScalarType::f64;
    default: return std::nullopt;
  }
}

std::optional<at::Tensor> toAten(const tensor::LocalTensor& shard) {
  if (auto* own = dynamic_cast<AtenOwner*>(shard.owner().get())) {
    const at::Tensor& t = own->tensor;
    if (t.data_ptr() == shard.data() && t.sizes().equals(shard.shape()) &&
        t.strides().equals(shard.strides()))
      return t;
  }
  if (shard.device().kind != tensor::DeviceKind::cpu) return std::nullopt;
  // Memory the engine or another front end holds: a tensor over it that
  // keeps its owner alive as long as ATen keeps the storage.
  return at::from_blob(
      shard.data(), shard.shape(), shard.strides(),
      [owner = shard.owner()](void*) mutable { owner.reset(); },
      at::TensorOptions().dtype(atenType(shard.dtype())));
}

tensor::LocalTensor fromAten(const at::Tensor& t) {
  auto type = crownType(t.scalar_type());
  TORCH_CHECK_TYPE(type.has_value(), "a result of type ", t.scalar_type(),
                   ", which crown's engines do not hold: convert it (to float32, int64, ...) "
                   "in the same op");
  tensor::Device device;
  if (t.is_cuda()) {
    device.kind = tensor::DeviceKind::cuda;
    device.index = t.device().index() < 0 ? 0 : t.device().index();
  } else {
    TORCH_CHECK(t.is_cpu(), "a result on ", t.device(), ", which crown's engines do not hold");
  }
  // Straight from ATen's sizes: a shape seen lately on this thread costs no vector.
  return tensor::LocalTensor::wrapStrided(
      *type, {t.sizes().data(), t.sizes().size()}, {t.strides().data(), t.strides().size()},
      t.data_ptr(), std::allocate_shared<AtenOwner>(Recycling<AtenOwner>(), t), device);
}

}  // namespace crown::python::aten
