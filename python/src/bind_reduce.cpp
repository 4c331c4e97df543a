// Python reducers: the reducer family "py:" (mesh/reducer.h). A key carries
// the Accumulator's combine function, pickled and base64-encoded
// (crown._protocol.reducer_key), so every hop of a reduce cast can fold with
// it without anything sent ahead. Each fold takes the GIL and calls
// crown._runtime.combine on the two outcomes (RawOutcomes: a tag byte and
// the pickle, py_actor.h); a combine that raises throws
// PythonError, which fails the member whose reply could not be folded.
// Registered when _crown is imported, so on every rank alike (SPMD).
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "crown/mesh/reducer.h"
#include "gil.h"
#include "py_actor.h"

namespace py = pybind11;

namespace crown::python {
namespace {

constexpr const char* kPrefix = "py:";

wire::Bytes combine(const std::string& key, const wire::Bytes& left, const wire::Bytes& right) {
  std::string folded;
  {
    if (!Py_IsInitialized()) throw Error("Python is gone: cannot fold a Python reduce");
    Gil gil;
    py::object fold = py::module_::import("crown._runtime").attr("combine");
    py::bytes result = fold(key, py::bytes(left), py::bytes(right));
    folded = std::string(result);
  }
  if (folded.empty() || folded[0] != kValueTag) throw PythonError(folded.substr(1));
  return folded;
}

}  // namespace

void bindReduce(py::module_& m) {
  mesh::detail::registerReducerFamily(kPrefix, [](const std::string& key) {
    using Reducer = mesh::detail::Reducer;
    return std::make_shared<const Reducer>(
        Reducer{kRawOutcomeType,
                [key](const wire::Bytes& a, const wire::Bytes& b) { return combine(key, a, b); }});
  });
  m.attr("REDUCER_PREFIX") = kPrefix;
}

}  // namespace crown::python
