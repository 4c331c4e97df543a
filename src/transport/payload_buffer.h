// A received frame's payload buffer, sized for what a link is about to read
// into it (both backends: the Asio links' frame reader, the shared-memory
// links' reader). A recycled buffer when one is kept; a fresh large one asks
// for transparent huge pages before its first touch; no memset either way,
// since the read overwrites every byte.
#pragma once

#include <cstddef>

#include "crown/wire/payload.h"

namespace crown::transport {

/// `payload` becomes `bytes` long, its contents undefined.
void allocateForPayload(wire::Bytes& payload, std::size_t bytes);

}  // namespace crown::transport
