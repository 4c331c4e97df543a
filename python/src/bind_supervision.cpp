// The supervision module for Python (supervision/module.h): which actor this
// thread acts for (and acting for one on threads Python starts), the owner
// table the module keeps of every mesh spawned on this rank, and crown's own
// spawns, which nobody owns. The reports themselves reach Python through
// PyActor (Supervise, in the owning actor's turn) and the controller's hook
// (bind_runtime.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "bindings.h"
#include "crown/actor/actor.h"
#include "crown/actor/proc.h"
#include "crown/supervision/module.h"

namespace py = pybind11;

namespace crown::python {
namespace {

// `with _crown.acting_as(rank, local):` (one thread: enter and exit on it).
class PyActingAs {
 public:
  explicit PyActingAs(ActorId actor) : actor_(actor) {}
  void enter() { acting_ = std::make_unique<ActingAs>(actor_); }
  void exit() { acting_.reset(); }

 private:
  ActorId actor_;
  std::unique_ptr<ActingAs> acting_;
};

py::object ownerOf(const std::optional<ActorId>& owner) {
  if (!owner) return py::none();
  return py::make_tuple(owner->rank, owner->local);
}

py::tuple toPython(const supervision::OwnedMesh& owned) {
  return py::make_tuple(owned.mesh, ownerOf(owned.owner), owned.shape, owned.name, owned.live);
}

}  // namespace

void bindSupervision(py::module_& m) {
  m.def(
      "acting_actor",
      []() -> py::object { return ownerOf(actingActor()); },
      "(rank, local id) of the actor this thread acts for (its handler, its constructor, "
      "its loop thread, a thread it started), or None.");
  py::class_<PyActingAs>(m, "ActingAs")
      .def("__enter__", [](PyActingAs& self) { self.enter(); })
      .def("__exit__", [](PyActingAs& self, py::args) { self.exit(); });
  m.def(
      "acting_as",
      [](Rank rank, std::uint64_t local) { return PyActingAs(ActorId{rank, local}); },
      "A context manager: within it, this thread acts for actor (rank, local).");
  m.def(
      "owned_mesh",
      [](std::uint64_t mesh) -> py::object {
        auto owned = supervision::ownedMesh(Proc::current(), mesh);
        if (!owned) return py::none();
        return toPython(*owned);
      },
      "(mesh, owner, shape, name, live ranks) of mesh spawned on this rank, or None once "
      "forgotten; owner is (rank, local) or None for the controller.");
  m.def(
      "owned_by",
      [](std::optional<std::uint64_t> local) {
        std::optional<ActorId> owner;
        if (local) owner = ActorId{Proc::current().rank(), *local};
        py::list found;
        for (const auto& owned : supervision::ownedBy(Proc::current(), owner))
          found.append(toPython(owned));
        return found;
      },
      py::arg("local"),
      "The meshes spawned on this rank that actor `local` of this rank owns (None: the "
      "controller), as owned_mesh gives each.");
  m.def(
      "members_stopped",
      [](std::uint64_t mesh, const std::vector<Rank>& ranks) {
        supervision::membersStopped(Proc::current(), mesh, ranks);
      },
      "The members of mesh on ranks were stopped; once all are, its owner is forgotten.");
}

}  // namespace crown::python
