// Gil: takes the GIL on a runtime thread (an IoPool thread that runs a Python
// actor or folds a Python reduce). A thread without a Python thread state
// would get a new one, made and destroyed around every message (an mmap and
// a munmap each time); each pool thread keeps the first one it gets instead.
#pragma once

#include <pybind11/pybind11.h>

namespace crown::python {

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
