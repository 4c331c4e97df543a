#include "py_payload.h"

#include <algorithm>
#include <memory>

#include "gil.h"

namespace py = pybind11;

namespace crown::python {
namespace {

// Below this a received payload is handed to Python as bytes (one small
// copy); from it up, as a view of the received buffer.
constexpr std::size_t kViewFromBytes = 64 * 1024;

// Received bytes, kept alive by every memoryview (and every numpy array)
// made from them; recycled for the next large payload once they are done.
struct ReceivedBuffer {
  wire::Bytes bytes;
  explicit ReceivedBuffer(wire::Bytes&& received) : bytes(std::move(received)) {}
  ReceivedBuffer(ReceivedBuffer&&) = default;
  ~ReceivedBuffer() { wire::recycle(std::move(bytes)); }
};

// A Python buffer held for a payload segment. Released with the GIL, on
// whichever thread the transport drops the segment (after its write).
struct HeldBuffer {
  Py_buffer view{};
  ~HeldBuffer() {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to release into
    Gil gil;
    PyBuffer_Release(&view);
  }
};

}  // namespace

wire::Payload payloadOf(const std::string& prefix, const py::bytes& head,
                        const py::list& buffers) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(head.ptr(), &data, &size) != 0) throw py::error_already_set();
  std::string bytes;
  bytes.reserve(prefix.size() + static_cast<std::size_t>(size));
  bytes.append(prefix).append(data, static_cast<std::size_t>(size));
  wire::countCopied(bytes.size());
  wire::Payload payload(std::move(bytes));
  for (py::handle buffer : buffers) {
    auto held = std::make_shared<HeldBuffer>();
    if (PyObject_GetBuffer(buffer.ptr(), &held->view, PyBUF_C_CONTIGUOUS) != 0)
      throw py::error_already_set();
    payload.append(held, static_cast<const char*>(held->view.buf),
                   static_cast<std::size_t>(held->view.len));
  }
  return payload;
}

py::object viewOf(wire::Bytes&& bytes, std::size_t offset) {
  offset = std::min(offset, bytes.size());
  if (bytes.size() < kViewFromBytes) {
    // Small: a bytes object costs less than a buffer object and its view.
    wire::countCopied(bytes.size() - offset);
    return py::bytes(bytes.data() + offset, bytes.size() - offset);
  }
  auto owner = py::cast(ReceivedBuffer(std::move(bytes)));
  py::object view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(owner.ptr()));
  if (!view) throw py::error_already_set();
  if (offset == 0) return view;
  py::ssize_t size = py::len(view);
  return view[py::slice(static_cast<py::ssize_t>(offset), size, 1)];
}

void bindPayload(py::module_& m) {
  py::class_<ReceivedBuffer>(m, "ReceivedBuffer", py::buffer_protocol())
      .def_buffer([](ReceivedBuffer& received) {
        return py::buffer_info(received.bytes.data(), 1, py::format_descriptor<std::uint8_t>::format(),
                               1, {received.bytes.size()}, {1}, /*readonly=*/false);
      });
  m.def("copied_bytes", &wire::copiedBytes,
        "Payload bytes crown's own code copied in this process (for tests of zero copy).");
}

}  // namespace crown::python
