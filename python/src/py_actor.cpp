#include "py_actor.h"

namespace py = pybind11;

namespace crown::python {

PyActor::PyActor(std::string spawnPayload) {
  py::gil_scoped_acquire gil;
  py::module_ runtime = py::module_::import("crown._runtime");
  // A Python exception here becomes the spawn's error, naming this rank.
  instance_ = runtime.attr("construct")(py::bytes(spawnPayload));
  handle<PyCall>([this](const PyCall& call) {
    py::gil_scoped_acquire gil;
    py::object dispatch = py::module_::import("crown._runtime").attr("dispatch");
    py::bytes outcome = dispatch(instance_, py::bytes(call.payload));
    return PyOutcome{std::string(outcome)};
  });
}

PyActor::~PyActor() {
  if (!Py_IsInitialized()) {
    instance_.release();  // the interpreter is gone: nothing left to free it with
    return;
  }
  py::gil_scoped_acquire gil;
  instance_ = py::object();
}

}  // namespace crown::python
