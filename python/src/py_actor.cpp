#include "py_actor.h"

namespace py = pybind11;

namespace crown::python {
namespace {

// Takes the GIL on a runtime thread. A thread without a Python thread state
// would get a new one, made and destroyed around every message (an mmap and
// a munmap each time); each pool thread keeps the first one it gets instead.
class Gil {
 public:
  Gil() {
    thread_local bool kept = false;
    if (!kept) {
      gil_.inc_ref();
      kept = true;
    }
  }

 private:
  py::gil_scoped_acquire gil_;
};

}  // namespace

PyActor::PyActor(std::string spawnPayload) {
  Gil gil;
  py::module_ runtime = py::module_::import("crown._runtime");
  // A Python exception here becomes the spawn's error, naming this rank.
  instance_ = runtime.attr("construct")(py::bytes(spawnPayload));
  dispatch_ = runtime.attr("dispatch");
  handle<PyCall>([this](const PyCall& call) {
    Gil gil;
    py::bytes outcome = dispatch_(instance_, py::bytes(call.payload));
    return PyOutcome{std::string(outcome)};
  });
}

PyActor::~PyActor() {
  if (!Py_IsInitialized()) {
    instance_.release();  // the interpreter is gone: nothing left to free it with
    dispatch_.release();
    return;
  }
  Gil gil;
  instance_ = py::object();
  dispatch_ = py::object();
}

}  // namespace crown::python
