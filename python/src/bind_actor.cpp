// Python actors on meshes: spawn, direct requests, casts (call, stream,
// broadcast), choose, and the futures they return. Every wait releases the
// GIL, so C++ threads (and Python actors on this rank) run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "crown/actor/failure.h"
#include "crown/mesh/point.h"
#include "crown/mesh/proc_mesh.h"
#include "py_actor.h"

namespace py = pybind11;

namespace crown::python {
namespace {

using Outcome = PyOutcome;

std::chrono::milliseconds toMillis(double seconds) {
  if (seconds < 0) throw py::value_error("a timeout must not be negative");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

/// An entry's error as plain values: (kind, message, rank, host), kind one of
/// "raised" (a C++ handler threw), "lost" (its process), "stopped", "error".
py::tuple describe(const std::exception_ptr& error, std::size_t rank) {
  auto failure = crown::detail::describeFailure(error, static_cast<Rank>(rank));
  using Failure = crown::detail::RemoteFailure;
  const char* kind = "error";
  switch (failure.category) {
    case Failure::kRaised:
      kind = "raised";
      break;
    case Failure::kActorStopped:
      kind = "stopped";
      break;
    case Failure::kProcessLost:
      kind = "lost";
      break;
  }
  return py::make_tuple(kind, mesh::detail::describe(error), failure.rank, failure.host);
}

class RequestFuture {
 public:
  explicit RequestFuture(Future<Outcome> future) : future_(std::move(future)) {}
  py::bytes get(std::optional<double> timeout) {
    std::string payload;
    {
      py::gil_scoped_release release;
      payload = (timeout ? future_.get(toMillis(*timeout)) : future_.get()).payload;
    }
    return py::bytes(payload);
  }
  bool done() const { return future_.isReady(); }

 private:
  Future<Outcome> future_;
};

class CastFuture {
 public:
  explicit CastFuture(Future<ValueMesh<Outcome>> future) : future_(std::move(future)) {}
  /// [(rank, payload or None, error or None)] in row-major order.
  py::list get(std::optional<double> timeout) {
    ValueMesh<Outcome> replies;
    {
      py::gil_scoped_release release;
      replies = timeout ? future_.get(toMillis(*timeout)) : future_.get();
    }
    py::list entries;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      std::size_t rank = replies.rank(i);
      const auto& entry = replies.entries()[i];
      if (entry.error) {
        entries.append(py::make_tuple(rank, py::none(), describe(entry.error, rank)));
      } else {
        entries.append(py::make_tuple(rank, py::bytes(entry.value->payload), py::none()));
      }
    }
    return entries;
  }
  bool done() const { return future_.isReady(); }

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
      item = timeout ? stream_.next(toMillis(*timeout)) : stream_.next();
    }
    if (!item) return py::none();
    if (item->error)
      return py::make_tuple(item->rank, py::none(), describe(item->error, item->rank));
    return py::make_tuple(item->rank, py::bytes(item->value->payload), py::none());
  }

 private:
  MeshStream<Outcome> stream_;
};

ActorMesh<PyActor> meshOf(const mesh::Shape& shape, std::uint64_t local) {
  return ActorMesh<PyActor>(shape, local);
}

}  // namespace

void bindActor(py::module_& m) {
  py::class_<RequestFuture>(m, "RequestFuture")
      .def("get", &RequestFuture::get, py::arg("timeout") = py::none())
      .def("done", &RequestFuture::done);
  py::class_<CastFuture>(m, "CastFuture")
      .def("get", &CastFuture::get, py::arg("timeout") = py::none())
      .def("done", &CastFuture::done);
  py::class_<CastStream>(m, "CastStream")
      .def("next", &CastStream::next, py::arg("timeout") = py::none());

  m.def(
      "spawn",
      [](const mesh::Shape& shape, const std::string& name, const py::bytes& payload) {
        std::string bytes = payload;
        py::gil_scoped_release release;  // rank 0's own actor is constructed on a pool thread
        return ProcMesh(shape).spawn<PyActor>(name, bytes).localId();
      },
      "Constructs the pickled (class, args, kwargs) on every rank of shape; returns the "
      "mesh's actor id.");
  m.def("request", [](std::size_t rank, std::uint64_t local, const py::bytes& payload) {
    return RequestFuture(Proc::current().request<Outcome>(ActorId{static_cast<Rank>(rank), local},
                                                          PyCall{std::string(payload)}));
  });
  m.def("send", [](std::size_t rank, std::uint64_t local, const py::bytes& payload) {
    Proc::current().send(ActorId{static_cast<Rank>(rank), local}, PyCall{std::string(payload)});
  });
  m.def("cast_call", [](const mesh::Shape& shape, std::uint64_t local, const py::bytes& payload) {
    return CastFuture(meshOf(shape, local).call<Outcome>(PyCall{std::string(payload)}));
  });
  m.def("cast_stream", [](const mesh::Shape& shape, std::uint64_t local, const py::bytes& payload) {
    return CastStream(meshOf(shape, local).stream<Outcome>(PyCall{std::string(payload)}));
  });
  m.def("cast_broadcast",
        [](const mesh::Shape& shape, std::uint64_t local, const py::bytes& payload) {
          meshOf(shape, local).broadcast(PyCall{std::string(payload)});
        });
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
}

}  // namespace crown::python
