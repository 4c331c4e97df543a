// PyActor (py_actor.h): construction, dispatch and the Python exceptions of
// one-way calls and reduces thrown as PythonError, fatal ones as ActorFatal.
#include "py_actor.h"

#include <atomic>

#include "crown/common/log.h"
#include "crown/supervision/job_end.h"
#include "crown/supervision/module.h"
#include "gil.h"
#include "py_payload.h"

namespace py = pybind11;

namespace crown::python {
namespace {
std::atomic<std::size_t> g_live{0};
}  // namespace

std::size_t PyActor::live() { return g_live.load(); }

PyActor::PyActor(std::string spawnPayload) {
  // The Python __init__ runs in the actor's first turn, not here (on the mesh
  // agent): the spawn is delivered at once, the proc's other spawns and the
  // mesh's other members go on, and messages to this member wait behind its
  // constructor. A Python exception there (the import too) kills the member
  // with the traceback construct() wrote (no C++ names around it); its owner
  // hears, and calls to it are refused with that cause.
  onStart([this, payload = std::move(spawnPayload)] {
    Gil gil;
    try {
      py::module_ runtime = py::module_::import("crown._runtime");
      dispatch_ = runtime.attr("dispatch");
      instance_ = runtime.attr("construct")(py::bytes(payload));
    } catch (py::error_already_set& e) {
      std::string report = py::str(e.value());
      throw PythonError(report);
    }
  });
  // Zero copy: the arguments' arrays wrap the received bytes, and the
  // result's arrays go to the socket from their own memory.
  handleRaw(kRawCallType, [this](wire::Bytes& payload) {
    bool report = !payload.empty() && payload[0] != 0;
    wire::Payload reply;
    std::string failure;
    bool fatal = false;
    {
      Gil gil;
      py::tuple parts = dispatch_(instance_, viewOf(std::move(payload), 1), report);
      py::bytes head = parts[0];
      std::string_view tagged = head;
      fatal = !tagged.empty() && tagged[0] == kFatalTag;
      if (fatal || (report && !tagged.empty() && tagged[0] == kRaisedTag)) {
        failure = tagged.substr(1);
      } else {
        reply = payloadOf("", head, parts[1]);
      }
    }
    // Thrown without the GIL: the mailbox logs it (with the traceback) and
    // tells the modules, or the reduce fails this member.
    if (fatal) throw ActorFatal(failure);
    if (!failure.empty()) throw PythonError(failure);
    return crown::detail::HandlerResult{kRawOutcomeType, std::move(reply)};
  });
  // A member of a mesh this actor owns died (the supervision module), in
  // this actor's turn: __supervise__ runs; a failure it does not handle is
  // thrown, so the actor dies of it (a one-way message) and its own owner hears.
  handle<supervision::Supervise>([this](const supervision::Supervise& report) {
    std::string outcome;
    {
      Gil gil;
      const auto& f = report.failure;
      try {
        py::object failure = py::module_::import("crown._supervision")
                                 .attr("failure")(f.mesh, f.rank, f.host, f.actor, f.cause);
        py::bytes result =
            py::module_::import("crown._runtime").attr("supervise_in_turn")(instance_, failure);
        outcome = std::string(result);
      } catch (py::error_already_set& e) {  // crown's own glue failed: not handled
        outcome = std::string(1, kRaisedTag) + "supervising the failure of mesh '" + f.actor +
                  "' failed: " + e.what() + "\n" + f.cause;
      }
    }
    if (!outcome.empty() && outcome[0] == kFatalTag) throw ActorFatal(outcome.substr(1));
    if (!outcome.empty() && outcome[0] == kRaisedTag) throw PythonError(outcome.substr(1));
  });
  ++g_live;
}

std::string PyActor::dying(const std::string& cause) noexcept {
  if (!Py_IsInitialized()) return {};
  Gil gil;
  try {
    // No instance: its constructor is what failed.
    py::object instance = instance_ ? instance_ : py::none();
    py::object failed = py::module_::import("crown._runtime").attr("dying")(instance, cause);
    return failed.is_none() ? std::string() : failed.cast<std::string>();
  } catch (const std::exception& e) {  // _runtime.dying reports its own; this is a last resort
    log::get().error("actor '{}' could not clean up as it died: {}", name(), e.what());
    return {};
  }
}

PyActor::~PyActor() {
  --g_live;
  // The interpreter is gone, or the job ends without the program
  // (supervision/job_end.h: main may hold the GIL for good): leaked.
  if (!Py_IsInitialized() || supervision::programAbandoned()) {
    instance_.release();
    dispatch_.release();
    return;
  }
  Gil gil;
  try {
    if (instance_) py::module_::import("crown._runtime").attr("release")(instance_);
  } catch (const py::error_already_set&) {
    // The instance goes anyway; a loop that would not close is not worth a crash.
  }
  instance_ = py::object();
  dispatch_ = py::object();
}

}  // namespace crown::python
