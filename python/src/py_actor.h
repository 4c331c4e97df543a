// PyActor: the C++ actor that hosts one Python actor instance. Its messages
// carry pickled calls (crown._runtime.dispatch decodes them and pickles the
// outcome, so a Python exception travels as a value); it takes the GIL only
// while Python runs, never while C++ waits. Runs on the IoPool like any actor.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "crown/actor/actor.h"
#include "crown/wire/serialize.h"

namespace crown::python {

/// A pickled endpoint call: (method name, args, kwargs) with out-of-band buffers.
struct PyCall {
  std::string payload;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& payload;
  }
};

/// A pickled outcome: a tag byte (value or raised exception), then the pickle.
struct PyOutcome {
  std::string payload;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& payload;
  }
};

class PyActor : public Actor {
 public:
  /// spawnPayload: the pickled (class, args, kwargs).
  explicit PyActor(std::string spawnPayload);
  ~PyActor() override;

 private:
  pybind11::object instance_;
  pybind11::object dispatch_;  // crown._runtime.dispatch
};

}  // namespace crown::python

CROWN_MESSAGE(crown::python::PyCall, "crown.python.Call");
CROWN_MESSAGE(crown::python::PyOutcome, "crown.python.Outcome");
