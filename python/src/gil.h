// Gil: takes the GIL on a runtime thread (an IoPool thread that runs a Python
// actor or folds a Python reduce). A thread without a Python thread state
// would get a new one, made and destroyed around every message (an mmap and
// a munmap each time); each pool thread keeps the first one it gets instead.
#pragma once

#include <pybind11/pybind11.h>

namespace crown::python {

/// The interpreter is shutting down: a runtime thread must not take the GIL
/// (it may never be given back) nor free Python objects.
inline bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

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
  pybind11::gil_scoped_acquire gil_;
};

}  // namespace crown::python
