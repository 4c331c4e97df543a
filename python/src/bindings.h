// The _crown extension: one bindX per area of the C++ API (style.md).
#pragma once

#include <pybind11/pybind11.h>

namespace crown::python {

void bindErrors(pybind11::module_& m);
void bindRuntime(pybind11::module_& m);
void bindMesh(pybind11::module_& m);
void bindActor(pybind11::module_& m);
void bindReduce(pybind11::module_& m);
void bindPayload(pybind11::module_& m);  // py_payload.h
void bindTensor(pybind11::module_& m);
void bindTensorFastRecord(pybind11::module_& m);  // tensor_fast_record.cpp
void bindRdma(pybind11::module_& m);
void bindPort(pybind11::module_& m);  // bind_port.cpp
void bindSupervision(pybind11::module_& m);

}  // namespace crown::python
