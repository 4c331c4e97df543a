// Bootstrap from Python: every rank calls init(); rank 0 goes on as the
// controller, the others call serve(), which returns their exit code once the
// controller is done (SHT-1). Blocking calls release the GIL. log() writes
// through crown's logger, so Python's warnings sit with C++'s on stderr.
// Reports of messages lost for good (LostMessages) go to Python's
// crown.actor.unhandled_fault_hook on the rank that sent them, and reports of
// mesh members that died (supervision::MemberFailure) to crown._supervision
// on the rank that owns the mesh.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pthread.h>

#include <csignal>
#include <thread>

#include "bindings.h"
#include "crown/actor/lost_messages.h"
#include "crown/bootstrap/controller.h"
#include "crown/bootstrap/malloc_policy.h"
#include "crown/common/abortable.h"
#include "crown/common/log.h"
#include "crown/common/trace.h"
#include "crown/debug/logs.h"
#include "crown/debug/pdb.h"
#include "crown/debug/stacks.h"
#include "crown/mesh/world_shape.h"
#include "crown/supervision/job_end.h"
#include "crown/supervision/module.h"
#include "gil.h"

namespace py = pybind11;

namespace crown::python {

namespace {

// Python's timeouts are seconds, C++'s milliseconds.
std::chrono::milliseconds fromSeconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

// On the proc agent's pool thread. No Python object is kept, so nothing of
// Python's outlives the interpreter; once it is finalising, only the log
// line (already written) remains.
void toFaultHook(const LostMessages& lost) {
  if (!Py_IsInitialized() || finalizing()) return;
  Gil gil;
  try {
    py::module_::import("crown.actor")
        .attr("_messages_lost")(py::make_tuple(lost.sender.rank, lost.sender.local),
                                lost.dest.rank, lost.destName, lost.count, lost.first, lost.last,
                                toString(lost));
  } catch (py::error_already_set& e) {
    log::get().error("crown.actor.unhandled_fault_hook could not be called: {}", e.what());
  }
}

// On the supervision agent's pool thread, as toFaultHook: the controller's
// hook for the supervision module, which ends the job at its kUnhandled.
supervision::HookVerdict toSupervision(const supervision::MemberFailure& failure,
                                       const std::function<bool()>& begin) {
  using supervision::HookVerdict;
  if (!Py_IsInitialized() || finalizing()) return HookVerdict::kHandled;  // nobody left to hear
  // Once the job ends, ranks leave without a word (after a loss, without
  // the shutdown barrier): nothing they take with them is a failure now.
  if (Runtime::current().shuttingDown()) return HookVerdict::kHandled;
  // (A lost process comes here already fanned out over the meshes it held.)
  Gil gil;  // main may hold it in C code: begin() says whether it came in time
  if (!begin()) return HookVerdict::kLate;
  try {
    bool handled = py::module_::import("crown._supervision")
                       .attr("member_failed")(failure.mesh, failure.rank, failure.host,
                                              failure.actor, failure.cause)
                       .cast<bool>();
    return handled ? HookVerdict::kHandled : HookVerdict::kUnhandled;
  } catch (py::error_already_set& e) {  // crown's own glue failed: nobody handled it
    log::get().error("a failure of mesh '{}' (rank {}) could not be supervised: {}",
                     failure.actor, failure.rank, e.what());
    return HookVerdict::kUnhandled;
  }
}

// At the first unhandled fault, a real SIGINT to the thread that called
// init (Python's main thread): unlike interrupt_main() it wakes time.sleep,
// selectors and lock waits, and Python's handler raises KeyboardInterrupt
// there. Not when main is blocked in a crown wait (the abort wakes it with
// UnhandledFault, one exception is enough), nor when Python's SIGINT
// handler is gone (the default action would kill the controller unannounced).
void interruptThisThreadAtFault() {
  supervision::setMainInterrupt([main = pthread_self(), id = std::this_thread::get_id()] {
    if (inAbortableWait(id)) return;
    struct sigaction current {};
    if (::sigaction(SIGINT, nullptr, &current) != 0 || current.sa_handler == SIG_DFL ||
        current.sa_handler == SIG_IGN) {
      return;
    }
    ::pthread_kill(main, SIGINT);
  });
}

bool onPythonMainThread() {
  auto threading = py::module_::import("threading");
  return threading.attr("current_thread")().is(threading.attr("main_thread")());
}

}  // namespace

void bindRuntime(py::module_& m) {
  m.def(
      "init",
      [](std::vector<std::string> argv) {
        // MPI may keep pointers into argv: keep the strings for the process's life.
        static std::vector<std::string> kept;
        static std::vector<char*> pointers;
        kept = std::move(argv);
        for (auto& arg : kept) pointers.push_back(arg.data());
        pointers.push_back(nullptr);
        int argc = static_cast<int>(kept.size());
        char** args = pointers.data();
        bool mainThread = onPythonMainThread();
        py::gil_scoped_release release;
        Runtime& runtime = Runtime::init(&argc, &args);
        runtime.proc().setLostMessagesHook(toFaultHook);
        supervision::setFailureHook(runtime.proc(), toSupervision);
        if (runtime.topology().rank == 0 && mainThread) interruptThisThreadAtFault();
        return runtime.topology().rank;
      },
      "Bootstraps this rank (collective over MPI_COMM_WORLD); returns its rank.");
  m.def(
      "attach",
      [](const py::bytes& offer, const py::bytes& pad) {
        std::string offerBytes = offer, padBytes = pad;
        bool mainThread = onPythonMainThread();
        py::gil_scoped_release release;
        auto [host, address] = Runtime::attach(offerBytes, padBytes);
        Runtime& runtime = Runtime::current();
        runtime.proc().setLostMessagesHook(toFaultHook);
        supervision::setFailureHook(runtime.proc(), toSupervision);
        if (mainThread) interruptThisThreadAtFault();
        return std::make_tuple(runtime.topology().rank, host, py::bytes(address));
      },
      "Joins a served job as its client (_attach.py): offer from its controller, pad from the "
      "handshake; returns (rank, host, address) for the controller to admit.");
  m.def(
      "attach_offer",
      [](const py::bytes& pad) {
        std::string padBytes = pad;
        std::pair<Rank, std::string> offer;
        {
          py::gil_scoped_release release;
          offer = Runtime::current().offerAttach(padBytes);
        }
        return std::make_pair(offer.first, py::bytes(offer.second));
      },
      "On a served job's controller: (slot, offer) for a client that proved the token.");
  m.def(
      "admit_attached",
      [](Rank slot, const std::string& host, const py::bytes& address) {
        std::string addressBytes = address;
        py::gil_scoped_release release;
        Runtime::current().admitAttached(slot, host, addressBytes);
      },
      "On a served job's controller: every live rank admits the client in slot.");
  m.def(
      "release_attached", [](Rank slot) { Runtime::current().releaseAttached(slot); },
      py::call_guard<py::gil_scoped_release>(),
      "On a served job's controller: every live rank expects the client in slot to leave.");
  m.def(
      "leave", [] { Runtime::current().leave(); }, py::call_guard<py::gil_scoped_release>(),
      "On an attached client: closes its links; the job goes on.");
  m.def("attached", [] {
    try {
      return Runtime::current().attached();
    } catch (const Error&) {
      return false;
    }
  });
  m.def("initialised", [] {
    try {
      Runtime::current();
      return true;
    } catch (const Error&) {
      return false;
    }
  });
  m.def(
      "serve", [] { return serveUntilShutdown(Runtime::current()); },
      py::call_guard<py::gil_scoped_release>(),
      "A worker serves until the controller is done; returns the exit code.");
  m.def(
      "shutdown", [](int code) { finishController(Runtime::current(), code); },
      py::call_guard<py::gil_scoped_release>(),
      "The controller tells every worker to exit with code, and finishes.");
  m.def(
      "keep_malloc_memory",
      [] {
        MallocPlan plan = keepMallocMemory();
        return plan.keep ? py::object(py::none()) : py::object(py::str(plan.reason));
      },
      "Sets glibc's malloc to keep freed memory, once per process (bootstrap/malloc_policy.h); "
      "None when it did, else why not.");
  m.def("unhandled_faults", &supervision::unhandledFaults,
        "The reports of the faults left unhandled on this rank, in order.");
  m.def("owns_mpi", [] { return Runtime::current().ownsMpi(); });
  m.def("tracing", [] { return trace::on(); }, "Whether this rank records a trace (CROWN_TRACE).");
  m.def(
      "trace_endpoint",
      [](const std::string& endpoint) {
        const Actor* actor = Actor::current();
        trace::Span::renameInnermost(actor ? actor->name() + " " + endpoint : endpoint);
      },
      "Names the running handler's span after its Python endpoint (traces only).");
  m.def("rank", [] { return Runtime::current().topology().rank; });
  m.def("size", [] { return Runtime::current().topology().size; });
  m.def("host", [] {
    Runtime& runtime = Runtime::current();
    return runtime.proc().host(runtime.topology().rank);  // a replacement's too (respawn)
  });
  m.def(
      "set_stack_dump",
      [](int fd, int signal) { debug::setPythonStackDump(Runtime::current().proc(), fd, signal); },
      "On `signal`, faulthandler writes every thread's Python stack to file descriptor `fd`.");
  m.def(
      "stacks",
      [](const std::vector<Rank>& ranks, bool native, double timeout) {
        std::vector<debug::RankStacks> got;
        {
          py::gil_scoped_release release;  // this process's own dump needs no GIL either
          got = debug::collectStacks(Runtime::current().proc(), ranks, native,
                                     fromSeconds(timeout));
        }
        py::list out;
        for (const auto& one : got) {
          out.append(py::make_tuple(one.rank, one.host, one.pid, py::bytes(one.python),
                                    py::bytes(one.native), one.error));
        }
        return out;
      },
      py::arg("ranks"), py::arg("native"), py::arg("timeout"),
      "(rank, host, pid, python, native, error) of each rank, asked of all at once.");
  m.def(
      "forward_output",
      [](int stream, const std::string& text) {
        debug::forwardOutput(Runtime::current().proc(), stream, text);
      },
      py::call_guard<py::gil_scoped_release>(),
      "On a worker: text written to stream 1 (stdout) or 2 (stderr) goes to the controller, "
      "line by line.");
  py::class_<debug::PdbSession>(m, "PdbSession", "Where a remote pdb session stopped.")
      .def(py::init<>())
      .def_readwrite("rank", &debug::PdbSession::rank)
      .def_readwrite("session", &debug::PdbSession::session)
      .def_readwrite("actor", &debug::PdbSession::actor)
      .def_readwrite("member", &debug::PdbSession::member)
      .def_readwrite("coords", &debug::PdbSession::coords)
      .def_readwrite("host", &debug::PdbSession::host)
      .def_readwrite("function", &debug::PdbSession::function)
      .def_readwrite("file", &debug::PdbSession::file)
      .def_readwrite("line", &debug::PdbSession::line);
  m.def(
      "pdb_prompt",
      [](const debug::PdbSession& where, std::string output) {
        return debug::pdbPrompt(Runtime::current().proc(), where, std::move(output));
      },
      py::call_guard<py::gil_scoped_release>(),
      "A stopped pdb session's output goes to the controller (crown debug); returns the line "
      "typed for it, or None when none will come.");
  m.def(
      "pdb_ended",
      [](const debug::PdbSession& where, std::string output) {
        debug::pdbEnded(Runtime::current().proc(), where, std::move(output));
      },
      py::call_guard<py::gil_scoped_release>(), "The pdb session continued: its last output.");
  m.def(
      "set_log_window",
      [](double seconds) {
        debug::setLogWindow(Runtime::current().proc(),
                            fromSeconds(seconds));
      },
      "On the controller: the same line from many ranks within this many seconds is printed "
      "once, with the ranks (0: every line at once).");
  m.def(
      "redirect_worker_output",
      [](int out, int err) { debug::redirectWorkerOutput(Runtime::current().proc(), out, err); },
      py::call_guard<py::gil_scoped_release>(),
      "On the controller: the workers' forwarded lines go to these file descriptors (1, 2: "
      "its own stdout and stderr again).");
  m.def(
      "flush_logs",
      [](double timeout) {
        debug::flushLogs(Runtime::current().proc(),
                         fromSeconds(timeout));
      },
      py::call_guard<py::gil_scoped_release>(),
      "On the controller: the other ranks send what they hold, then every line so far is printed.");
  m.def(
      "respawn",
      [](const std::vector<Rank>& lost) { return Runtime::current().respawn(lost); },
      py::call_guard<py::gil_scoped_release>(),
      "On the controller: replaces the lost ranks with new processes (MPI_Comm_spawn) and "
      "returns their ranks, in the same order.");
  m.def(
      "reserve_procs", [](std::size_t count) { return Runtime::current().reserveProcs(count); },
      py::call_guard<py::gil_scoped_release>(),
      "On the controller: reserves count consecutive rank slots for one spawn_procs and returns "
      "their ranks; raises where the launcher cannot start processes or spares are spent.");
  m.def(
      "spawn_procs",
      [](const std::vector<Rank>& ranks, const std::string& program,
         const std::vector<std::string>& arguments, const std::string& host) {
        Runtime::current().spawnProcs(ranks, program, arguments, host);
      },
      py::arg("ranks"), py::arg("program"), py::arg("arguments"), py::arg("host") = "",
      py::call_guard<py::gil_scoped_release>(),
      "On the controller: starts a process of program in each reserved rank (MPI_Comm_spawn) "
      "on host (\"\": where the runtime places them); returns once they have joined the "
      "fabric (they share an MPI world).");
  m.def(
      "host_of", [](Rank rank) { return Runtime::current().proc().host(rank); },
      "The host name of rank (\"\" when unknown).");
  m.def(
      "stop_spawned",
      [](const std::vector<Rank>& ranks) { Runtime::current().stopSpawned(ranks); },
      py::call_guard<py::gil_scoped_release>(),
      "On the controller: ends processes that spawn_procs started, and waits until they are gone.");
  m.def("spawn_refusal", &Runtime::spawnRefusal,
        "Why this job cannot start processes (a job srun started), or '' when it can.");
  m.def("launched_alone", &Runtime::launchedAlone,
        "True when no launcher (mpirun, srun) started this process: crown makes it an MPI "
        "singleton, which starts procs on demand.");
  m.def(
      "log",
      [](const std::string& level, const std::string& message) {
        auto parsed = spdlog::level::from_str(level);
        if (parsed == spdlog::level::off && level != "off")
          throw py::value_error("no log level '" + level + "'");
        log::get().log(parsed, "{}", message);
      },
      "Logs message through crown's logger (stderr, tagged with the rank) at level: "
      "trace, debug, info, warn, error.");
  m.def("world_shape", [] {
    const auto& topology = Runtime::current().topology();
    return mesh::hostsProcsShape(topology.hostIndexOf, topology.hostNames);
  });
}

}  // namespace crown::python
