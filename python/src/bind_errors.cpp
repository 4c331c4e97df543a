// crown's C++ errors as Python exceptions of the same meaning (style.md):
// ProcessLost -> SupervisionError (with .rank and .host), ActorFailed ->
// SupervisionError (with .rank, .host, .actor and .cause), RemoteError ->
// RemoteActorError, MeshError -> MeshError (with .failures), Timeout ->
// TimeoutError, ConfigError -> ValueError, supervision::UnhandledFault ->
// UnhandledFault (a SystemExit with code 1: the job ends, and an
// `except Exception` does not swallow it), anything else of crown's -> CrownError.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "crown/common/error.h"
#include "crown/mesh/value_mesh.h"
#include "crown/supervision/job_end.h"

namespace py = pybind11;

namespace crown::python {
namespace {

// The types live as long as the interpreter; a handle (no reference of its
// own) is never released by a C++ static destructor after Python is gone.
py::handle makeError(py::module_& m, const char* name, PyObject* base) {
  py::object type = py::reinterpret_steal<py::object>(
      PyErr_NewException((std::string("crown._crown.") + name).c_str(), base, nullptr));
  m.attr(name) = type;
  return type.release();
}

void raise(py::handle type, const std::string& message, py::dict attributes) {
  py::object error = type(message);
  for (auto item : attributes) error.attr(item.first) = item.second;
  PyErr_SetObject(type.ptr(), error.ptr());
}

}  // namespace

void bindErrors(py::module_& m) {
  static py::handle crownError = makeError(m, "CrownError", PyExc_RuntimeError);
  static py::handle supervision = makeError(m, "SupervisionError", crownError.ptr());
  static py::handle remote = makeError(m, "RemoteActorError", crownError.ptr());
  static py::handle meshError = makeError(m, "MeshError", crownError.ptr());
  static py::handle actorStopped = makeError(m, "ActorStoppedError", crownError.ptr());
  static py::handle unhandledFault = makeError(m, "UnhandledFault", PyExc_SystemExit);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ProcessLost& e) {
      raise(supervision, e.what(), py::dict(py::arg("rank") = e.rank(), py::arg("host") = e.host()));
    } catch (const ActorFailed& e) {
      raise(supervision, e.what(),
            py::dict(py::arg("rank") = e.rank(), py::arg("host") = e.host(),
                     py::arg("actor") = e.actor(), py::arg("cause") = e.cause()));
    } catch (const RemoteError& e) {
      raise(remote, e.what(),
            py::dict(py::arg("rank") = e.rank(), py::arg("actor") = e.actor(),
                     py::arg("remote_type") = e.remoteType(),
                     py::arg("remote_message") = e.remoteMessage()));
    } catch (const MeshError& e) {
      py::list failures;
      for (const auto& failure : e.failures()) failures.append(py::make_tuple(failure.rank, failure.what));
      raise(meshError, e.what(), py::dict(py::arg("failures") = failures));
    } catch (const ActorStopped& e) {
      PyErr_SetString(actorStopped.ptr(), e.what());
    } catch (const supervision::UnhandledFault& e) {
      raise(unhandledFault, e.what(), py::dict(py::arg("code") = 1));
    } catch (const Timeout& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(crownError.ptr(), e.what());
    }
  });
}

}  // namespace crown::python
