// PyActor: the C++ actor that hosts one Python actor instance. Its messages
// carry pickled calls (crown._runtime.dispatch decodes them); it takes the
// GIL only while Python runs, never while C++ waits. Runs on the IoPool like
// any actor. A Python exception in a call with a caller travels back as a
// value (a pickled outcome); in a call nobody answers to (broadcast, a
// port's send) or whose replies are folded (a reduce), PyActor throws it as
// PythonError, so the mailbox logs it on this rank and the actor dies
// (Proc::Module::actorFailed tells its owner), or the reduce fails that
// member. A BaseException that is not an Exception (SystemExit,
// KeyboardInterrupt) kills the actor under any call: thrown as ActorFatal.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>

#include "crown/actor/actor.h"
#include "crown/common/error.h"

namespace crown::python {

/// The outcome tags, defined here only: _crown.OUTCOME_VALUE, _RAISED and
/// _FATAL, which crown._protocol names VALUE, RAISED and FATAL.
constexpr char kValueTag = '\x00';
constexpr char kRaisedTag = '\x01';
constexpr char kFatalTag = '\x02';

/// Every Python call, direct or cast, is one encoding with no C++ archive
/// around it: a RawCall's payload is a flag byte (1: report a Python
/// exception as a thrown PythonError instead of a reply: one-way calls and
/// reduces), then the pickled (method name, args, kwargs) with its
/// out-of-band buffers where they lie; the reply, a RawOutcome, is the tag
/// byte and the pickle likewise (py_payload.h).
inline const std::string kRawCallType = "crown.python.RawCall";
inline const std::string kRawOutcomeType = "crown.python.RawOutcome";

/// A Python exception thrown through C++: its text report with the traceback.
class PythonError : public UserCodeError {
 public:
  using UserCodeError::UserCodeError;
};

class PyActor : public Actor {
 public:
  /// spawnPayload: the pickled (class, args, kwargs).
  explicit PyActor(std::string spawnPayload);
  ~PyActor() override;

  /// How many Python actors this process hosts now.
  static std::size_t live();

 protected:
  /// crown._runtime.dying: the meshes it spawned stop, then its __cleanup__ runs.
  std::string dying(const std::string& cause) noexcept override;

 private:
  pybind11::object instance_;
  pybind11::object dispatch_;  // crown._runtime.dispatch
};

}  // namespace crown::python

