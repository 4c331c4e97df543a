// Native ports for Python (crown/actor/port.h): open_port() opens one owned
// by the running actor (or this process), PortReceiver.next() waits for its
// items with the GIL released, and a PortHandle is the picklable address
// that senders use. Unpickled on a member, a PortHandle holds the port there
// (Proc::holdPort), so the port hears at once when the last reference goes
// without a send (kOnce, kPerMember) or when the holding actor goes.
// Values are pickles (head plus out-of-band buffers, as `send`); errors
// sent from Python are values too (Python pickles them); the kernel's own
// errors (a lost rank, a stopped owner or holder, a drop) come as error
// entries, described as CastStream's are.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "crown/actor/failure.h"
#include "crown/actor/proc.h"
#include "crown/mesh/value_mesh.h"
#include "program_wait.h"
#include "py_payload.h"
#include "wait_entries.h"

namespace py = pybind11;

namespace crown::python {
namespace {

PortMode modeOf(const std::string& mode) {
  if (mode == "once") return PortMode::kOnce;
  if (mode == "per_member") return PortMode::kPerMember;
  if (mode == "stream") return PortMode::kStream;
  throw py::value_error("a port's mode is 'once', 'per_member' or 'stream', not '" + mode + "'");
}

const char* nameOf(PortMode mode) {
  switch (mode) {
    case PortMode::kOnce:
      return "once";
    case PortMode::kPerMember:
      return "per_member";
    case PortMode::kStream:
      break;
  }
  return "stream";
}

/// An error entry as CastStream's (wait_entries.h), "dropped" when the
/// holder let the port go without sending.
py::tuple describeItem(const PortItem& item) {
  return describeEntry(item.error, item.from, item.dropped);
}

// A port's address, and this process's hold on it once it sends (or was
// unpickled here: then at once, so that dropping it tells the port).
class PyPort {
 public:
  PyPort(PortRef ref, bool hold) : ref_(ref) {
    if (!hold) return;
    handle_ = Proc::current().holdPort(ref_);
    ref_ = handle_.ref();  // handed on from here, it announces (port.h)
  }
  const PortRef& ref() const { return ref_; }
  void send(wire::Payload payload) {
    if (!handle_) handle_ = Proc::current().holdPort(ref_);
    handle_.send(std::string(), std::move(payload));
  }

 private:
  PortRef ref_;
  PortHandle handle_;
};

PortRef refOf(std::size_t rank, std::uint64_t local, std::uint64_t id, const std::string& mode,
              bool announce) {
  return PortRef{ActorId{static_cast<Rank>(rank), local}, id, modeOf(mode), announce};
}

}  // namespace

void bindPort(py::module_& m) {
  py::class_<PyPort, std::shared_ptr<PyPort>>(m, "PortHandle",
                                              "A port's picklable address (port.h).")
      .def_property_readonly("rank", [](const PyPort& p) { return p.ref().owner.rank; })
      .def_property_readonly("local", [](const PyPort& p) { return p.ref().owner.local; })
      .def_property_readonly("id", [](const PyPort& p) { return p.ref().id; })
      .def_property_readonly("mode", [](const PyPort& p) { return nameOf(p.ref().mode); })
      .def(
          "send",
          [](PyPort& port, const py::bytes& head, const py::list& buffers) {
            wire::Payload payload = payloadOf(std::string(), head, buffers);
            py::gil_scoped_release release;  // FLO-1: a stream port's sender may wait
            port.send(std::move(payload));
          },
          py::arg("head"), py::arg("buffers"),
          "Sends a pickle's head and its out-of-band buffers to the port.")
      .def(py::pickle(
          [](const PyPort& p) {
            const PortRef& ref = p.ref();
            return py::make_tuple(ref.owner.rank, ref.owner.local, ref.id, nameOf(ref.mode),
                                  ref.announce);
          },
          [](const py::tuple& t) {  // unpickled here: held by the running actor
            return std::make_shared<PyPort>(
                refOf(t[0].cast<std::size_t>(), t[1].cast<std::uint64_t>(),
                      t[2].cast<std::uint64_t>(), t[3].cast<std::string>(), t[4].cast<bool>()),
                true);
          }));

  py::class_<PortReceiver>(m, "PortReceiver", "The owner's end of a native port.")
      .def(
          "port",
          [](const PortReceiver& receiver) { return std::make_shared<PyPort>(receiver.ref(), false); },
          "Its address (not held here until it sends).")
      .def(
          "next",
          [](PortReceiver& receiver, std::optional<double> timeout) -> py::object {
            std::optional<PortItem> item;
            {
              ProgramWait program;  // an unhandled fault ends it (docs/supervision.md)
              py::gil_scoped_release release;
              item = timeout ? receiver.next(toMillis(*timeout)) : receiver.next();
            }
            if (!item) return py::none();
            if (item->error) return py::make_tuple(item->from, py::none(), describeItem(*item));
            return py::make_tuple(item->from, viewOf(std::move(item->payload)), py::none());
          },
          py::arg("timeout") = py::none(),
          "(rank, payload, None), (rank, None, error) or None once the port has ended; "
          "TimeoutError after `timeout`; raises the port's failure (its owner stopped).")
      .def(
          "close",
          [](PortReceiver& receiver) {
            py::gil_scoped_release release;
            receiver.close();
          },
          "Later values are dropped.")
      .def("queued", &PortReceiver::queued);
  m.def(
      "open_port",
      [](const std::string& mode, std::vector<std::size_t> watched) {
        std::vector<Rank> ranks(watched.begin(), watched.end());
        return Proc::current().openPort(modeOf(mode), std::move(ranks));
      },
      py::arg("mode") = "stream", py::arg("watched") = std::vector<std::size_t>{},
      "Opens a port owned by the running actor (else this process): 'once', "
      "'per_member' (one item from each of `watched`) or 'stream'. Each watched rank "
      "lost is an error entry from it.");
  m.def(
      "open_ports", [] { return Proc::current().openPorts(); },
      "Ports open on this process.");
}

}  // namespace crown::python
