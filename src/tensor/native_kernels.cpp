// The native kernels: enough for a C++ controller to do real work without
// Python. CPU only; inputs of other layouts are made contiguous first.
// matmul goes through Debian's BLAS (OpenBLAS, installed by install-deps).
#include "tensor/native_kernels.h"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "crown/common/error.h"
#include "crown/tensor/kernel.h"

namespace crown::tensor::detail {
namespace {

// Runs fn(T{}) with T the C++ type of `type`, for the arithmetic types.
template <class Fn>
void dispatch(ScalarType type, const char* op, Fn&& fn) {
  switch (type) {
    case ScalarType::u8: return fn(std::uint8_t{});
    case ScalarType::i8: return fn(std::int8_t{});
    case ScalarType::i16: return fn(std::int16_t{});
    case ScalarType::i32: return fn(std::int32_t{});
    case ScalarType::i64: return fn(std::int64_t{});
    case ScalarType::f32: return fn(float{});
    case ScalarType::f64: return fn(double{});
    default: break;
  }
  throw ConfigError(std::string("the native kernel '") + op + "' has no " + scalarName(type) +
                    " version: use float32, float64 or an integer type");
}

std::vector<LocalTensor> one(LocalTensor tensor) { return {std::move(tensor)}; }

void expectInputs(const KernelContext& context, const std::vector<LocalTensor>& inputs,
                  std::size_t count) {
  if (inputs.size() != count) {
    throw ConfigError("the kernel '" + context.call.kernel + "' takes " + std::to_string(count) +
                      " inputs, not " + std::to_string(inputs.size()));
  }
}

LocalTensor filled(const KernelContext& context, double value) {
  LocalTensor out = LocalTensor::allocate(context.call.dtype, context.call.ints);
  dispatch(out.dtype(), context.call.kernel.c_str(), [&](auto zero) {
    using T = decltype(zero);
    T* data = out.data<T>();
    std::fill(data, data + out.numel(), static_cast<T>(value));
  });
  return out;
}

std::vector<LocalTensor> fill(KernelContext& context, const std::vector<LocalTensor>& inputs) {
  expectInputs(context, inputs, 0);
  CROWN_CHECK(context.call.reals.size() == 1, "fill takes its value in reals[0]");
  return one(filled(context, context.call.reals[0]));
}

std::vector<LocalTensor> arange(KernelContext& context, const std::vector<LocalTensor>& inputs) {
  expectInputs(context, inputs, 0);
  const auto& r = context.call.reals;
  CROWN_CHECK(r.size() == 3 && r[2] != 0, "arange takes start, end and a non-zero step in reals");
  auto count = static_cast<std::int64_t>(std::max(0.0, std::ceil((r[1] - r[0]) / r[2])));
  LocalTensor out = LocalTensor::allocate(context.call.dtype, {count});
  dispatch(out.dtype(), "arange", [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < count; ++i)
      out.data<T>()[i] = static_cast<T>(r[0] + static_cast<double>(i) * r[2]);
  });
  return one(std::move(out));
}

std::vector<LocalTensor> rand(KernelContext& context, const std::vector<LocalTensor>& inputs) {
  expectInputs(context, inputs, 0);
  LocalTensor out = LocalTensor::allocate(context.call.dtype, context.call.ints);
  if (out.dtype() == ScalarType::f32) {
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (std::int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = uniform(context.generator);
  } else if (out.dtype() == ScalarType::f64) {
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (std::int64_t i = 0; i < out.numel(); ++i)
      out.data<double>()[i] = uniform(context.generator);
  } else {
    throw ConfigError(std::string("rand makes float32 or float64 tensors, not ") +
                      scalarName(out.dtype()));
  }
  return one(std::move(out));
}

// a op b elementwise: the same shape, or b (or a) with one element.
template <class Op>
std::vector<LocalTensor> elementwise(KernelContext& context,
                                     const std::vector<LocalTensor>& inputs, Op op) {
  expectInputs(context, inputs, 2);
  LocalTensor a = inputs[0].contiguousCopy(), b = inputs[1].contiguousCopy();
  const std::string& name = context.call.kernel;
  if (a.dtype() != b.dtype()) {
    throw ConfigError(name + " of " + a.describe() + " and " + b.describe() +
                      ": the types differ (convert one first)");
  }
  bool same = a.shape() == b.shape();
  if (!same && a.numel() != 1 && b.numel() != 1) {
    throw ConfigError(name + " of " + a.describe() + " and " + b.describe() +
                      ": the shapes differ and neither has one element");
  }
  const LocalTensor& big = (same || b.numel() == 1) ? a : b;
  LocalTensor out = LocalTensor::allocate(a.dtype(), big.shape());
  dispatch(a.dtype(), name.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* z = out.data<T>();
    std::int64_t n = out.numel();
    std::int64_t xStep = a.numel() == 1 && !same ? 0 : 1;
    std::int64_t yStep = b.numel() == 1 && !same ? 0 : 1;
    for (std::int64_t i = 0; i < n; ++i) z[i] = op(x[i * xStep], y[i * yStep]);
  });
  return one(std::move(out));
}

std::vector<LocalTensor> matmul(KernelContext& context, const std::vector<LocalTensor>& inputs) {
  expectInputs(context, inputs, 2);
  LocalTensor a = inputs[0].contiguousCopy(), b = inputs[1].contiguousCopy();
  if (a.dims() != 2 || b.dims() != 2 || a.shape()[1] != b.shape()[0] || a.dtype() != b.dtype()) {
    throw ConfigError("matmul of " + a.describe() + " and " + b.describe() +
                      ": it takes two matrices [m, k] and [k, n] of one type");
  }
  auto m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  LocalTensor out = LocalTensor::allocate(a.dtype(), {m, n});
  auto im = static_cast<int>(m), ik = static_cast<int>(k), in = static_cast<int>(n);
  if (a.dtype() == ScalarType::f32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, in, ik, 1.0f, a.data<float>(), ik,
                b.data<float>(), in, 0.0f, out.data<float>(), in);
  } else if (a.dtype() == ScalarType::f64) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, in, ik, 1.0, a.data<double>(), ik,
                b.data<double>(), in, 0.0, out.data<double>(), in);
  } else {
    throw ConfigError(std::string("matmul of ") + scalarName(a.dtype()) +
                      " matrices: the native kernel takes float32 or float64");
  }
  return one(std::move(out));
}

std::vector<LocalTensor> total(KernelContext& context, const std::vector<LocalTensor>& inputs,
                               bool mean) {
  expectInputs(context, inputs, 1);
  LocalTensor a = inputs[0].contiguousCopy();
  if (mean && !isFloating(a.dtype())) {
    throw ConfigError(std::string("mean of a ") + scalarName(a.dtype()) +
                      " tensor: it takes a floating-point one");
  }
  LocalTensor out = LocalTensor::allocate(a.dtype(), {});
  dispatch(a.dtype(), context.call.kernel.c_str(), [&](auto zero) {
    using T = decltype(zero);
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
    Acc sum = 0;
    for (std::int64_t i = 0; i < a.numel(); ++i) sum += a.data<T>()[i];
    if (mean) sum = a.numel() ? sum / static_cast<Acc>(a.numel()) : Acc(NAN);
    *out.data<T>() = static_cast<T>(sum);
  });
  return one(std::move(out));
}

}  // namespace

void registerNativeKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerKernel("fill", fill);
    registerKernel("zeros", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      expectInputs(c, in, 0);
      return one(filled(c, 0));
    });
    registerKernel("ones", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      expectInputs(c, in, 0);
      return one(filled(c, 1));
    });
    registerKernel("arange", arange);
    registerKernel("rand", rand);
    registerKernel("add", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      return elementwise(c, in, [](auto x, auto y) { return static_cast<decltype(x)>(x + y); });
    });
    registerKernel("sub", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      return elementwise(c, in, [](auto x, auto y) { return static_cast<decltype(x)>(x - y); });
    });
    registerKernel("mul", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      return elementwise(c, in, [](auto x, auto y) { return static_cast<decltype(x)>(x * y); });
    });
    registerKernel("div", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      return elementwise(c, in, [](auto x, auto y) {
        using T = decltype(x);
        if constexpr (std::is_integral_v<T>) {
          if (y == 0) throw ConfigError("integer division by zero");
        }
        return static_cast<T>(x / y);
      });
    });
    registerKernel("matmul", matmul);
    registerKernel("sum", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      return total(c, in, false);
    });
    registerKernel("mean", [](KernelContext& c, const std::vector<LocalTensor>& in) {
      return total(c, in, true);
    });
  });
}

}  // namespace crown::tensor::detail
