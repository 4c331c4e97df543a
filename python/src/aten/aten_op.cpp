#include "aten_op.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/jit_type.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>

#include <nlohmann/json.hpp>
#include <set>

#include "aten_tensor.h"

namespace crown::python::aten {
namespace {

using nlohmann::json;

c10::ScalarType dtypeNamed(const std::string& name) {
  static const std::unordered_map<std::string, c10::ScalarType> types = {
      {"bool", at::kBool},        {"uint8", at::kByte},       {"int8", at::kChar},
      {"int16", at::kShort},      {"int32", at::kInt},        {"int64", at::kLong},
      {"float16", at::kHalf},     {"bfloat16", at::kBFloat16}, {"float32", at::kFloat},
      {"float64", at::kDouble},   {"complex64", at::kComplexFloat},
      {"complex128", at::kComplexDouble}};
  auto it = types.find(name);
  if (it == types.end()) throw NotNative{};
  return it->second;
}

c10::MemoryFormat memoryFormatNamed(const std::string& name) {
  if (name == "contiguous_format") return c10::MemoryFormat::Contiguous;
  if (name == "preserve_format") return c10::MemoryFormat::Preserve;
  if (name == "channels_last") return c10::MemoryFormat::ChannelsLast;
  if (name == "channels_last_3d") return c10::MemoryFormat::ChannelsLast3d;
  throw NotNative{};
}

// A JSON object {"<kind>": value}: the value of that kind, or nullptr.
const json* tagged(const json& v, const char* kind) {
  if (!v.is_object()) return nullptr;
  auto it = v.find(kind);
  return it == v.end() ? nullptr : &*it;
}

c10::Scalar scalarOf(const json& v) {
  if (v.is_boolean()) return c10::Scalar(v.get<bool>());
  if (v.is_number_integer()) return c10::Scalar(v.get<std::int64_t>());
  if (v.is_number_float()) return c10::Scalar(v.get<double>());
  throw NotNative{};
}

// An int, or a dtype, layout or memory format, which boxed calls pass as ints.
std::int64_t intOf(const json& v) {
  if (v.is_number_integer() || v.is_boolean()) return v.get<std::int64_t>();
  if (const json* name = tagged(v, "dtype"))
    return static_cast<std::int64_t>(dtypeNamed(name->get<std::string>()));
  if (const json* name = tagged(v, "layout"); name && *name == "strided")
    return static_cast<std::int64_t>(c10::kStrided);
  if (const json* name = tagged(v, "memory_format"))
    return static_cast<std::int64_t>(memoryFormatNamed(name->get<std::string>()));
  throw NotNative{};
}

// One argument of the schema's `type` from its recorded value; the places
// of input shards are left empty and noted in `inputs` (one for a tensor,
// one per item for a list of tensors).
c10::IValue convert(const c10::TypePtr& type, const json& v, std::vector<std::size_t>& inputs,
                    c10::optional<std::int32_t> listSize) {
  using K = c10::TypeKind;
  if (type->kind() == K::OptionalType) {
    if (v.is_null()) return c10::IValue();
    return convert(type->castRaw<c10::OptionalType>()->getElementType(), v, inputs, listSize);
  }
  switch (type->kind()) {
    case K::TensorType:
      if (const json* k = tagged(v, "input")) {
        inputs.push_back(k->get<std::size_t>());
        return c10::IValue();
      }
      // A Python number where the op takes a tensor (mul.Tensor(x, 0.5)):
      // a wrapped number, as torch makes it, so that it promotes as a scalar.
      return at::native::wrapped_scalar_tensor(scalarOf(v));
    case K::IntType:
    case K::SymIntType:
    case K::ScalarTypeType:
    case K::LayoutType:
    case K::MemoryFormatType:
      return intOf(v);  // schemas may name a dtype, layout or memory format an int
    case K::FloatType:
      if (!v.is_number()) throw NotNative{};
      return v.get<double>();
    case K::BoolType:
      if (!v.is_boolean()) throw NotNative{};
      return v.get<bool>();
    case K::NumberType:
      return scalarOf(v);
    case K::StringType:
      if (!v.is_string()) throw NotNative{};
      return v.get<std::string>();
    case K::DeviceObjType:
      if (const json* name = tagged(v, "device"); name && *name == "cpu") return c10::Device("cpu");
      throw NotNative{};
    case K::ListType: {
      auto element = type->castRaw<c10::ListType>()->getElementType();
      std::vector<json> items;
      if (v.is_array()) {
        items = v.get<std::vector<json>>();
      } else if (listSize) {  // int[2] given one int: torch repeats it
        items.assign(static_cast<std::size_t>(*listSize), v);
      } else {
        items.push_back(v);
      }
      switch (element->kind()) {
        case K::IntType:
        case K::SymIntType: {
          std::vector<std::int64_t> ints;
          for (const json& item : items) ints.push_back(intOf(item));
          return ints;
        }
        case K::FloatType: {
          std::vector<double> reals;
          for (const json& item : items) {
            if (!item.is_number()) throw NotNative{};
            reals.push_back(item.get<double>());
          }
          return reals;
        }
        case K::BoolType: {
          c10::List<bool> bools;
          for (const json& item : items) {
            if (!item.is_boolean()) throw NotNative{};
            bools.push_back(item.get<bool>());
          }
          return bools;
        }
        case K::TensorType: {  // cat, stack: every item an input
          for (const json& item : items) {
            const json* k = tagged(item, "input");
            if (k == nullptr) throw NotNative{};
            inputs.push_back(k->get<std::size_t>());
          }
          return c10::IValue();
        }
        default:
          throw NotNative{};
      }
    }
    default:
      throw NotNative{};
  }
}

// The binary ops whose CPU kernels take a float32 operand and a Python
// number cast to float32 beforehand exactly as TensorIterator casts it
// (compute_types: .to(common dtype)): float32 is their common dtype.
bool castsNumberAhead(const std::string& op, const std::string& overload) {
  static const std::set<std::string> ops = {"aten::add",  "aten::sub",  "aten::mul",  "aten::div",
                                            "aten::add_", "aten::sub_", "aten::mul_", "aten::div_"};
  return overload == "Tensor" && ops.count(op) != 0;
}

bool returnsTensors(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns()) {
    const auto& type = r.type();
    if (type->kind() == c10::TypeKind::TensorType) continue;
    if (type->kind() == c10::TypeKind::ListType &&
        type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType)
      continue;
    return false;
  }
  return true;
}

}  // namespace

PreparedOp::PreparedOp(std::string_view spec) {
  json j = json::parse(spec, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw NotNative{};
  std::string op = j.value("op", ""), overload = j.value("overload", "");
  name_ = op + "." + (overload.empty() ? "default" : overload);
  op_ = c10::Dispatcher::singleton().findSchema({op, overload});
  if (!op_) throw NotNative{};
  const c10::FunctionSchema& schema = op_->schema();
  if (schema.is_vararg() || !returnsTensors(schema)) throw NotNative{};
  const json& args = j.at("args");
  const json& kwargs = j.at("kwargs");
  if (!args.is_array() || !kwargs.is_object() || args.size() > schema.arguments().size())
    throw NotNative{};
  std::size_t named = 0;
  for (std::size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    std::vector<std::size_t> inputs;
    if (i < args.size()) {
      arguments_.push_back(convert(argument.type(), args[i], inputs, argument.N()));
    } else if (auto it = kwargs.find(argument.name()); it != kwargs.end()) {
      arguments_.push_back(convert(argument.type(), *it, inputs, argument.N()));
      ++named;
    } else if (argument.default_value()) {
      arguments_.push_back(*argument.default_value());
    } else {
      throw NotNative{};
    }
    if (!inputs.empty()) {
      bool list = argument.type()->kind() == c10::TypeKind::ListType;
      slots_.push_back({i, std::move(inputs), list});
    }
  }
  if (named != kwargs.size()) throw NotNative{};  // a name the schema does not have
  picks_ = j.at("picks").get<std::vector<std::int64_t>>();
  if (castsNumberAhead(op, overload) && slots_.size() == 1 && !slots_.front().list) {
    for (std::size_t i = 0; i < arguments_.size(); ++i) {
      if (!arguments_[i].isTensor()) continue;
      const at::Tensor& number = arguments_[i].toTensor();
      if (!number.unsafeGetTensorImpl()->is_wrapped_number() || number.is_complex()) continue;
      at::Tensor float32 = number.to(at::kFloat);
      float32.unsafeGetTensorImpl()->set_wrapped_number(true);
      float32Numbers_.emplace_back(i, std::move(float32));
    }
  }
}

std::vector<tensor::LocalTensor> PreparedOp::run(
    const std::vector<tensor::LocalTensor>& inputs) const {
  // This thread's stack, its capacity kept from op to op (no allocation per
  // call); emptied on the way out, so that it holds no shard for later.
  thread_local std::vector<c10::IValue> stack;
  stack.assign(arguments_.begin(), arguments_.end());
  struct Emptied {
    ~Emptied() { stack.clear(); }
  } emptied;
  auto shard = [&inputs](std::size_t k) {
    if (k >= inputs.size()) throw NotNative{};
    auto t = toAten(inputs[k]);
    if (!t || !t->is_cpu()) throw NotNative{};  // GPU shards: torch's own streams, in Python
    return std::move(*t);
  };
  for (const Slot& slot : slots_) {
    if (slot.list) {
      c10::List<at::Tensor> items;
      for (std::size_t k : slot.inputs) items.push_back(shard(k));
      stack[slot.position] = std::move(items);
    } else {
      stack[slot.position] = shard(slot.inputs.front());
    }
  }
  // The shard is float32: TensorIterator would cast the (float64) number to
  // it on every call (.to(), an allocation, a quarter of the op's time); it
  // gets it cast already, the same value. Only float32: bf16 and half
  // kernels may read the number's original value (later torch's do).
  if (!float32Numbers_.empty() &&
      stack[slots_.front().position].toTensor().scalar_type() == at::kFloat)
    for (const auto& [position, number] : float32Numbers_) stack[position] = number;
  op_->callBoxed(stack);
  thread_local std::vector<const at::Tensor*> flat;  // the outputs in torch.utils._pytree order
  flat.clear();
  for (const c10::IValue& out : stack) {
    if (out.isTensor()) {
      flat.push_back(&out.toTensor());
    } else {
      for (const c10::IValue& item : out.toListRef()) flat.push_back(&item.toTensor());
    }
  }
  std::vector<tensor::LocalTensor> results;
  results.reserve(picks_.size());
  for (std::int64_t p : picks_) {
    if (p >= 0) {
      TORCH_CHECK(static_cast<std::size_t>(p) < flat.size(), name_, " made ", flat.size(),
                  " outputs, and output ", p, " was recorded");
      results.push_back(fromAten(*flat[static_cast<std::size_t>(p)]));
    } else {
      results.push_back(inputs.at(static_cast<std::size_t>(-p - 1)));  // written in place
    }
  }
  return results;
}

const PreparedOp* PreparedOps::find(std::string_view spec) {
  auto it = ops_.find(spec);
  if (it != ops_.end()) return it->second.get();
  if (ops_.size() >= kLimit) ops_.clear();
  std::unique_ptr<PreparedOp> op;
  try {
    op = std::make_unique<PreparedOp>(spec);
  } catch (const NotNative&) {
  } catch (const std::exception&) {  // a malformed spec: Python's path says what is wrong
  }
  return ops_.emplace(std::string(spec), std::move(op)).first->second.get();
}

}  // namespace crown::python::aten
