// The _crown extension: one bindX(module) per area of the C++ API (bindings.h).
#include "bindings.h"

PYBIND11_MODULE(_crown, m) {
  m.doc() = "crown's C++ runtime; use the crown package, not this module";
  crown::python::bindErrors(m);
  crown::python::bindPayload(m);
  crown::python::bindRuntime(m);
  crown::python::bindMesh(m);
  crown::python::bindActor(m);
  crown::python::bindReduce(m);
  crown::python::bindTensor(m);
  crown::python::bindTensorFastRecord(m);
  crown::python::bindRdma(m);
  crown::python::bindPort(m);
  crown::python::bindSupervision(m);
}
