// RDMA buffers (crown::rdma, include/crown/rdma/buffer.h) for crown.rdma:
// a handle registered from an address and a size (the Python side finds
// them in a tensor, an array or a memoryview, and the registration holds
// that object until it ends: a drop from any proc, its owner actor's stop,
// the proc's stop; never a handle's garbage collection), transfers that
// return a future, and the handle's fields for pickling.
// Every call that may wait releases the GIL. BufferError becomes
// crown.rdma.RDMAError; the other errors map as bind_errors.cpp says
// (ConfigError -> ValueError, Timeout -> TimeoutError, ProcessLost ->
// SupervisionError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "crown/rdma/buffer.h"
#include "crown/rdma/device_memory.h"
#include "gil.h"

namespace py = pybind11;

namespace crown::python {
namespace {

std::chrono::milliseconds toMillis(double seconds) {
  if (!(seconds > 0)) throw py::value_error("an RDMA timeout must be positive");
  // Below a millisecond still means "a deadline", not "none".
  return std::chrono::milliseconds(
      std::max<std::int64_t>(1, static_cast<std::int64_t>(seconds * 1000)));
}

// A CUDA tensor's memory is registered or moved only where crown knows it
// for device memory (a build with CUDA, a device present): anything else
// would hand MPI or memcpy a pointer the host cannot touch.
void checkOnGpu(std::uintptr_t address, bool onGpu) {
  if (onGpu && !rdma::isDeviceMemory(reinterpret_cast<const void*>(address))) {
    throw py::value_error(
        rdma::deviceMemory()
            ? "a CUDA tensor whose memory CUDA does not know as the device's (no CUDA device "
              "visible to this process?)"
            : "a CUDA tensor, but this build of crown has no CUDA support (built without the "
              "CUDA toolkit): copy it to the CPU first");
  }
}

// What owns a registered buffer's memory (the tensor, array or memoryview),
// held by the registration and let go of, with the GIL, on whichever thread
// ends it (the pool's, or the proc's stop); once the interpreter is gone or
// going, kept (nothing left to free it with).
std::shared_ptr<void> keepAlive(py::object owner) {
  if (owner.is_none()) return nullptr;
  return std::shared_ptr<void>(new py::object(std::move(owner)), [](void* p) {
    auto* held = static_cast<py::object*>(p);
    if (!Py_IsInitialized() || finalizing()) {
      held->release();
      delete held;
      return;
    }
    Gil gil;
    delete held;
  });
}

class RdmaFuture {
 public:
  explicit RdmaFuture(Future<void> future) : future_(std::move(future)) {}
  // A get that times out leaves the transfer running and the future
  // pending (crown.actor.Future's rule): only the transfer's own timeout
  // ends it, once MPI has let go of the local memory.
  void get(std::optional<double> timeout) {
    py::gil_scoped_release release;
    if (timeout) {
      auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(*timeout * 1000));
      if (!future_.state().waitUntil(std::chrono::steady_clock::now() + ms)) {
        throw Timeout("an RDMA transfer not done within " + std::to_string(ms.count()) +
                      " ms (it goes on: wait again)");
      }
    }
    future_.get();
  }
  bool done() const { return future_.isReady(); }

 private:
  Future<void> future_;
};

using rdma::Buffer;

}  // namespace

void bindRdma(py::module_& m) {
  static py::handle rdmaError = [&] {
    py::object base = m.attr("CrownError");
    py::object type = py::reinterpret_steal<py::object>(
        PyErr_NewException("crown._crown.RDMAError", base.ptr(), nullptr));
    m.attr("RDMAError") = type;
    return type.release();
  }();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const rdma::BufferError& e) {
      PyErr_SetString(rdmaError.ptr(), e.what());
    }
  });

  py::class_<RdmaFuture>(m, "RdmaFuture")
      .def("get", &RdmaFuture::get, py::arg("timeout") = py::none())
      .def("done", &RdmaFuture::done);

  py::class_<Buffer>(m, "RdmaHandle")
      .def(py::init([](std::uintptr_t address, std::size_t bytes, bool readOnly, bool onGpu,
                       py::object keep) {
             checkOnGpu(address, onGpu);
             std::shared_ptr<void> owner = keepAlive(std::move(keep));
             py::gil_scoped_release release;  // the attach waits for the MPI service thread
             return Buffer::registerMemory(reinterpret_cast<void*>(address), bytes, readOnly,
                                           std::move(owner));
           }),
           py::arg("address"), py::arg("size"), py::arg("read_only") = false,
           py::arg("on_gpu") = false, py::arg("keep") = py::none())
      .def_property_readonly("owner", &Buffer::owner)
      .def_property_readonly("owner_actor", &Buffer::ownerActor)
      .def_property_readonly("address", &Buffer::address)
      .def_property_readonly("size", &Buffer::size)
      .def_property_readonly("id", &Buffer::id)
      .def_property_readonly("read_only", &Buffer::readOnly)
      .def("describe", &Buffer::describe)
      .def(
          "read_into",
          [](const Buffer& b, std::uintptr_t address, std::size_t capacity, double timeout,
             bool onGpu) {
            checkOnGpu(address, onGpu);
            auto ms = toMillis(timeout);
            py::gil_scoped_release release;
            return RdmaFuture(b.readInto(reinterpret_cast<void*>(address), capacity, ms));
          },
          py::arg("address"), py::arg("capacity"), py::arg("timeout"), py::arg("on_gpu") = false)
      .def(
          "write_from",
          [](const Buffer& b, std::uintptr_t address, std::size_t bytes, double timeout,
             bool onGpu) {
            checkOnGpu(address, onGpu);
            auto ms = toMillis(timeout);
            py::gil_scoped_release release;
            return RdmaFuture(b.writeFrom(reinterpret_cast<const void*>(address), bytes, ms));
          },
          py::arg("address"), py::arg("size"), py::arg("timeout"), py::arg("on_gpu") = false)
      .def("drop",
           [](const Buffer& b) {
             py::gil_scoped_release release;
             return RdmaFuture(b.drop());
           })
      .def("drop_because",
           [](const Buffer& b, const std::string& why) {
             py::gil_scoped_release release;
             return RdmaFuture(b.dropBecause(why));
           })
      // Pickling: the handle's fields (owner, owner actor, address, size, id,
      // read-only), never the memory.
      .def("fields",
           [](const Buffer& b) {
             return py::make_tuple(b.owner(), b.ownerActor(), b.address(), b.size(), b.id(),
                                   b.readOnly());
           })
      .def_static("from_fields", [](Rank owner, std::uint64_t actor, std::uint64_t address,
                                    std::uint64_t bytes, std::uint64_t id, bool readOnly) {
        return Buffer(owner, actor, address, bytes, id, readOnly);
      });

  m.def(
      "rdma_check_local",
      [](std::uintptr_t address, bool onGpu) { checkOnGpu(address, onGpu); },
      py::arg("address"), py::arg("on_gpu"),
      "Raises ValueError for memory said to be a CUDA tensor's that this build cannot move.");

  m.def("rdma_stats", [] {
    rdma::Stats s = rdma::stats(Proc::current());
    py::dict out;
    out["registered"] = s.registered;
    out["leases"] = s.leases;
    out["attached"] = s.attached;
    out["window"] = s.window;
    out["cuda_aware_mpi"] = s.cudaAwareMpi;
    out["device_memory"] = s.deviceMemory;
    out["staged"] = s.staged;
    out["held"] = s.held;
    out["in_flight"] = s.inFlight;
    out["fallback_transfers"] = s.fallbackTransfers;
    out["single_copy_transfers"] = s.singleCopyTransfers;
    return out;
  });
}

}  // namespace crown::python
