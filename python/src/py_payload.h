// Zero-copy payloads between Python and the fabric (issue: bulk data through
// actors). Out: a pickle's head bytes plus its out-of-band buffers (numpy
// arrays' memory, say) become a wire::Payload whose segments are those
// buffers, held by their Python objects until the socket has taken them.
// In: a received payload (one allocation) becomes a writable memoryview that
// owns it, so unpickled arrays wrap the received bytes where they lie.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "crown/wire/payload.h"

namespace crown::python {

/// `prefix` + `head` (copied: the small part), then each buffer of
/// `buffers` (objects with the buffer protocol, C-contiguous) by reference.
/// With the GIL.
wire::Payload payloadOf(const std::string& prefix, const pybind11::bytes& head,
                        const pybind11::list& buffers);

/// `bytes` past `offset` for Python: a writable memoryview owning them, or,
/// for a small payload, a bytes copy (cheaper than the view). With the GIL.
pybind11::object viewOf(wire::Bytes&& bytes, std::size_t offset = 0);

/// Registers ReceivedBuffer (what viewOf's memoryviews are of).
void bindPayload(pybind11::module_& m);

}  // namespace crown::python
