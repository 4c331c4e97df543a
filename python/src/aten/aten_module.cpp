// crown._aten: torch ops run by crown's engines through ATen's dispatcher in
// C++, with no GIL, and shards handed to Python and back as the torch
// tensors they are. _crown calls it through the table in native_torch.h.
#include <pybind11/pybind11.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <atomic>

#include "../native_torch.h"
#include "aten_op.h"
#include "aten_tensor.h"

namespace py = pybind11;

namespace crown::python::aten {
namespace {

// torch's own exception types, as Python names them (torch/csrc/Exceptions.h
// maps them the same way when an op raises in Python).
std::string pythonTypeOf(const c10::Error& e) {
  if (dynamic_cast<const c10::IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const c10::ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const c10::TypeError*>(&e)) return "TypeError";
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return "NotImplementedError";
  return "RuntimeError";
}

// How many ops ran here natively, and how many went to Python (counts()).
std::atomic<std::uint64_t> nativeRuns{0}, pythonRuns{0};

NativeOutcome run(std::string_view spec, const std::vector<tensor::LocalTensor>& inputs,
                  std::vector<tensor::LocalTensor>& results, std::string& op,
                  std::string& message) {
  thread_local PreparedOps prepared;
  const PreparedOp* call = prepared.find(spec);
  if (call == nullptr) {
    pythonRuns.fetch_add(1, std::memory_order_relaxed);
    return NativeOutcome::usePython;
  }
  try {
    results = call->run(inputs);
    nativeRuns.fetch_add(1, std::memory_order_relaxed);
    return NativeOutcome::ran;
  } catch (const NotNative&) {
    pythonRuns.fetch_add(1, std::memory_order_relaxed);
    return NativeOutcome::usePython;
  } catch (const c10::Error& e) {
    message = pythonTypeOf(e) + ": " + e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = std::string("RuntimeError: ") + e.what();
  }
  op = call->name();  // only now: a name such as "aten::mul.Tensor" is a string allocated per op
  nativeRuns.fetch_add(1, std::memory_order_relaxed);  // it ran, and raised
  return NativeOutcome::failed;
}

PyObject* toPython(const tensor::LocalTensor& shard) {
  try {
    auto t = toAten(shard);
    return t ? THPVariable_Wrap(std::move(*t)) : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

bool fromPython(PyObject* object, tensor::LocalTensor& out) {
  if (!THPVariable_Check(object)) return false;
  const at::Tensor& t = THPVariable_Unpack(object);
  if (!crownType(t.scalar_type()) || !(t.is_cpu() || t.is_cuda())) return false;
  out = fromAten(t);
  return true;
}

bool gradEnabled() { return at::GradMode::is_enabled(); }

int requiresGrad(PyObject* object) {
  if (!THPVariable_Check(object)) return -1;
  return THPVariable_Unpack(object).requires_grad() ? 1 : 0;
}

const NativeTorch table{kNativeTorchVersion, &run,         &toPython,
                        &fromPython,         &gradEnabled, &requiresGrad};

}  // namespace
}  // namespace crown::python::aten

PYBIND11_MODULE(_aten, m) {
  m.doc() = "crown's engines run torch ops through ATen in C++ (no GIL); see native_torch.h";
  m.def("api", [] {
    return py::capsule(static_cast<const void*>(&crown::python::aten::table),
                       crown::python::kNativeTorchCapsule);
  });
  m.def(
      "counts",
      [] {
        return py::dict(py::arg("native") = crown::python::aten::nativeRuns.load(),
                        py::arg("python") = crown::python::aten::pythonRuns.load());
      },
      "How many \"aten\" calls this process ran natively, and how many it gave to Python.");
}
