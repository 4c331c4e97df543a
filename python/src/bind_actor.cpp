// Python actors on meshes: spawn, stop, direct requests and sends, casts
// (call, stream, broadcast, reduce), choose, and the futures they return.
// Every wait, and every send that may wait (FLO-1 backpressure), releases
// the GIL, so C++ threads (and Python actors on this rank) run meanwhile.
// One-way calls and reduces ask PyActor to throw a Python exception
// (py_actor.h), so it is logged and supervised, or fails its member.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "crown/actor/failure.h"
#include "crown/mesh/point.h"
#include "crown/mesh/proc_mesh.h"
#include "interruptible_wait.h"
#include "program_wait.h"
#include "py_actor.h"
#include "py_payload.h"
#include "wait_entries.h"

namespace py = pybind11;

namespace crown::python {
namespace {

// A cast's reply, a RawOutcome as it came (py_actor.h).
using Outcome = mesh::RawReply;

// A Python call for the fabric: the report flag byte (py_actor.h), then the
// pickle's head and its out-of-band buffers.
wire::Payload callPayload(bool report, const py::bytes& head, const py::list& buffers) {
  return payloadOf(std::string(1, report ? '\1' : '\0'), head, buffers);
}

// The same call in one buffer, as a cast carries it to every hop.
mesh::RawMessage castCall(bool report, const py::bytes& head, const py::list& buffers) {
  return {kRawCallType, callPayload(report, head, buffers).join()};
}

// A cast reply as Python reads it: the tagged pickle; a reply of another
// type (not a Python actor's) is a ProtocolError.
py::bytes outcomeBytes(const Outcome& reply) {
  if (reply.type != kRawOutcomeType)
    throw ProtocolError("a Python call was answered with " + reply.type);
  return py::bytes(reply.payload);
}

py::tuple describe(const std::exception_ptr& error, std::size_t rank) {
  return describeEntry(error, static_cast<Rank>(rank));
}

// A reduce's folded outcome, as bytes.
class OutcomeFuture {
 public:
  explicit OutcomeFuture(Future<Outcome> future) : future_(std::move(future)) {}
  py::bytes get(std::optional<double> timeout) {
    return outcomeBytes(waitInterruptibly(future_, timeout));
  }
  bool done() const { return future_.isReady(); }

 private:
  Future<Outcome> future_;
};

// A direct request's reply, a RawOutcome: handed to Python as a memoryview
// that owns the received bytes (no copy).
using RawReply = std::shared_ptr<wire::Bytes>;

class RequestFuture {
 public:
  explicit RequestFuture(Future<RawReply> future) : future_(std::move(future)) {}
  py::object get(std::optional<double> timeout) {
    if (view_) return view_;
    RawReply reply = waitInterruptibly(future_, timeout);
    view_ = viewOf(std::move(*reply));
    return view_;
  }
  bool done() const { return future_.isReady(); }

 private:
  Future<RawReply> future_;
  py::object view_;  // once got
};

Future<RawReply> requestRaw(Proc& proc, const ActorId& dest, wire::Payload payload) {
  auto state = std::make_shared<crown::detail::FutureState<RawReply>>();
  auto id = proc.requestRaw(dest, kRawCallType, std::move(payload),
                            [state](crown::detail::Outcome&& outcome) {
                              if (outcome.error) return state->setError(outcome.error);
                              if (outcome.type != kRawOutcomeType) {
                                return state->setError(std::make_exception_ptr(ProtocolError(
                                    "a Python call was answered with " + outcome.type)));
                              }
                              state->setValue(std::make_shared<wire::Bytes>(
                                  std::move(outcome.payload)));
                            });
  state->setCanceller([&proc, id] { proc.cancelRequest(id); });
  return Future<RawReply>(state);
}

class CastFuture {
 public:
  explicit CastFuture(Future<ValueMesh<Outcome>> future) : future_(std::move(future)) {}
  /// [(rank, payload or None, error or None)] in row-major order.
  py::list get(std::optional<double> timeout) {
    ValueMesh<Outcome> replies = waitInterruptibly(future_, timeout);
    py::list entries;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      std::size_t rank = replies.rank(i);
      const auto& entry = replies.entries()[i];
      if (entry.error) {
        entries.append(py::make_tuple(rank, py::none(), describe(entry.error, rank)));
      } else {
        entries.append(py::make_tuple(rank, outcomeBytes(*entry.value), py::none()));
      }
    }
    return entries;
  }
  bool done() const { return future_.isReady(); }
  /// Waits up to `timeout` seconds for every reply, cancelling nothing.
  bool wait(double timeout) {
    py::gil_scoped_release release;
    ProgramWait abortable;
    return future_.state().waitUntil(std::chrono::steady_clock::now() + toMillis(timeout));
  }

 private:
  Future<ValueMesh<Outcome>> future_;
};

class CastStream {
 public:
  explicit CastStream(MeshStream<Outcome> stream) : stream_(std::move(stream)) {}
  /// (rank, payload or None, error or None), or None when every member has answered.
  py::object next(std::optional<double> timeout) {
    std::optional<MeshStream<Outcome>::Item> item;
    {
      py::gil_scoped_release release;
      ProgramWait abortable;
      item = timeout ? stream_.next(toMillis(*timeout)) : stream_.next();
    }
    if (!item) return py::none();
    if (item->error)
      return py::make_tuple(item->rank, py::none(), describe(item->error, item->rank));
    return py::make_tuple(item->rank, outcomeBytes(*item->value), py::none());
  }

 private:
  MeshStream<Outcome> stream_;
};

// A spawn under way: each member hosted (its __init__ then runs in its own
// first turn), as (rank, what) for each rank that could not host it.
class SpawnFuture {
 public:
  explicit SpawnFuture(Future<ValueMesh<void>> future) : future_(std::move(future)) {}
  py::list get(std::optional<double> timeout) {
    std::vector<MeshError::Failure> failures = waitInterruptibly(future_, timeout).failures();
    py::list out;
    for (const auto& failure : failures) out.append(py::make_tuple(failure.rank, failure.what));
    return out;
  }
  bool done() const { return future_.isReady(); }
  /// Waits up to `timeout` seconds for every member to be hosted, cancelling nothing.
  bool wait(double timeout) {
    py::gil_scoped_release release;
    ProgramWait abortable;
    return future_.state().waitUntil(std::chrono::steady_clock::now() + toMillis(timeout));
  }

 private:
  Future<ValueMesh<void>> future_;
};

ActorMesh<PyActor> meshOf(const mesh::Shape& shape, std::uint64_t local) {
  return ActorMesh<PyActor>(shape, local);
}

}  // namespace

void bindActor(py::module_& m) {
  // The outcome tags, defined once (py_actor.h): crown._protocol reads them here.
  m.attr("OUTCOME_VALUE") = py::bytes(&kValueTag, 1);
  m.attr("OUTCOME_RAISED") = py::bytes(&kRaisedTag, 1);
  m.attr("OUTCOME_FATAL") = py::bytes(&kFatalTag, 1);
  py::class_<RequestFuture>(m, "RequestFuture")
      .def("get", &RequestFuture::get, py::arg("timeout") = py::none())
      .def("done", &RequestFuture::done);
  py::class_<OutcomeFuture>(m, "OutcomeFuture")
      .def("get", &OutcomeFuture::get, py::arg("timeout") = py::none())
      .def("done", &OutcomeFuture::done);
  py::class_<CastFuture>(m, "CastFuture")
      .def("get", &CastFuture::get, py::arg("timeout") = py::none())
      .def("done", &CastFuture::done)
      .def("wait", &CastFuture::wait, py::arg("timeout"));
  py::class_<SpawnFuture>(m, "SpawnFuture")
      .def("get", &SpawnFuture::get, py::arg("timeout") = py::none())
      .def("done", &SpawnFuture::done)
      .def("wait", &SpawnFuture::wait, py::arg("timeout"));
  py::class_<CastStream>(m, "CastStream")
      .def("next", &CastStream::next, py::arg("timeout") = py::none());

  m.def(
      "spawn_start",
      [](const mesh::Shape& shape, const std::string& name, const py::bytes& payload,
         std::optional<std::uint64_t> chosen) {
        using Registration = crown::detail::ActorFactoryRegistration<PyActor, std::string>;
        (void)Registration::registered;  // odr-use: the factory exists on every rank
        std::string bytes = payload;
        std::uint64_t local = 0;
        std::optional<Future<ValueMesh<void>>> future;
        {
          py::gil_scoped_release release;  // rank 0's own actor is constructed on a pool thread
          local = chosen ? *chosen : mesh::detail::newMeshLocal(Proc::current());
          future = mesh::detail::startSpawnMesh(
              shape, {Registration::key(), name, wire::packValues(bytes), local, shape});
        }
        return py::make_tuple(local, SpawnFuture(std::move(*future)));
      },
      py::arg("shape"), py::arg("name"), py::arg("payload"), py::arg("local") = py::none(),
      "Hosts a PyActor of the pickled (class, args, kwargs) on every rank of shape, without "
      "waiting: (the mesh's actor id, a SpawnFuture that completes once every rank has "
      "hosted its member; each runs its __init__ in its own first turn). "
      "`local`: an id from new_mesh_id(), for a caller that records it first.");
  m.def(
      "new_mesh_id", [] { return mesh::detail::newMeshLocal(Proc::current()); },
      "A new mesh actor id of this rank, for spawn_start.");
  // Sends release the GIL also because a local delivery takes the mailbox
  // lock, under which a stopped PyActor may be freed (which takes the GIL).
  m.def(
      "request",
      [](std::size_t rank, std::uint64_t local, const py::bytes& head, const py::list& buffers) {
        wire::Payload payload = callPayload(false, head, buffers);
        py::gil_scoped_release release;
        return RequestFuture(
            requestRaw(Proc::current(), ActorId{static_cast<Rank>(rank), local}, std::move(payload)));
      },
      "A direct call: the pickle's head and its out-of-band buffers, sent where they lie.");
  m.def("send", [](std::size_t rank, std::uint64_t local, const py::bytes& head,
                   const py::list& buffers) {
    wire::Payload payload = callPayload(true, head, buffers);
    py::gil_scoped_release release;
    Proc::current().sendRaw(ActorId{static_cast<Rank>(rank), local}, kRawCallType,
                            std::move(payload));
  });
  // Casts carry the call as direct requests do (one encoding: a RawCall).
  m.def(
      "cast_call",
      [](const mesh::Shape& shape, std::uint64_t local, const py::bytes& head,
         const py::list& buffers) {
        mesh::RawMessage call = castCall(false, head, buffers);
        py::gil_scoped_release release;
        return CastFuture(meshOf(shape, local).call<Outcome>(std::move(call)));
      },
      "Casts the call (the pickle's head and its out-of-band buffers); every member's outcome.");
  m.def("cast_stream", [](const mesh::Shape& shape, std::uint64_t local, const py::bytes& head,
                          const py::list& buffers) {
    mesh::RawMessage call = castCall(false, head, buffers);
    py::gil_scoped_release release;
    return CastStream(meshOf(shape, local).stream<Outcome>(std::move(call)));
  });
  m.def("cast_broadcast", [](const mesh::Shape& shape, std::uint64_t local,
                             const py::bytes& head, const py::list& buffers) {
    mesh::RawMessage call = castCall(true, head, buffers);
    py::gil_scoped_release release;
    meshOf(shape, local).broadcast(std::move(call));
  });
  m.def(
      "cast_reduce",
      [](const mesh::Shape& shape, std::uint64_t local, const py::bytes& head,
         const py::list& buffers, const std::string& reducerKey) {
        mesh::RawMessage call = castCall(true, head, buffers);
        // Released: the cast's aggregation may fold (and take the GIL) on a pool thread.
        py::gil_scoped_release release;
        return OutcomeFuture(meshOf(shape, local).reduceByKey<Outcome>(std::move(call), reducerKey));
      },
      "Casts the pickled call and folds the outcomes at every hop with the reducer of "
      "reducerKey (a \"py:\" key: crown._protocol.reducer_key). get() raises MeshError "
      "naming each member that failed or whose reply could not be folded.");
  m.def(
      "stop_mesh",
      [](const mesh::Shape& shape, std::uint64_t local, bool onlyStarting) {
        if (onlyStarting) {
          mesh::detail::stopMesh(shape, local, true);
        } else {
          meshOf(shape, local).stop();
        }
      },
      py::arg("shape"), py::arg("local"), py::arg("only_starting") = false,
      py::call_guard<py::gil_scoped_release>(),
      "Stops the mesh's actors on every proc of shape; blocks until they have stopped. "
      "only_starting: only those whose __init__ has not returned (the rest are left).");
  m.def("python_actors", &PyActor::live, "How many Python actors this process hosts now.");
  m.def("choose_rank", [](const mesh::Shape& shape) {
    return mesh::detail::chooseMember(Proc::current(), shape);
  });
  m.def("alive", [](std::size_t rank) { return Proc::current().alive(static_cast<Rank>(rank)); });
  m.def(
      "here",
      []() -> py::object {
        try {
          mesh::Point point = mesh::here();
          return py::make_tuple(point.rank, point.shape);
        } catch (const Error&) {
          return py::none();
        }
      },
      "(rank, Shape) of the mesh actor this thread runs, or None.");
  m.def(
      "current_actor",
      []() -> py::object {
        const Actor* actor = Actor::current();
        if (!actor) return py::none();
        return py::make_tuple(actor->id().rank, actor->id().local);
      },
      "(rank, local id) of the actor whose handler this thread runs, or None.");
}

}  // namespace crown::python
