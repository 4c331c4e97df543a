// A frame as a record of a shared-memory ring (shm_backend.h):
// [u32 envelope bytes][envelope][payload], written as parts so that the
// payload's segments go into the ring without being joined first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "crown/transport/transport.h"
#include "crown/wire/envelope.h"
#include "transport/shm/ring.h"

namespace crown::transport::shm {

/// The parts of `message`'s record; `head` holds the first (the length and
/// the envelope) and must outlive them, as `message` must.
std::vector<std::span<const std::byte>> recordParts(const OutMessage& message, std::string& head);

struct Frame {
  wire::Envelope envelope;
  wire::Bytes payload;
};

/// The frame of the record of `length` bytes begun on `ring` (Ring::begin),
/// its payload read straight into a buffer of its own (no copy after, no
/// memset before); nullopt when the ring closed first. Throws ProtocolError
/// saying why when the record breaks its format or `limits`, before a
/// buffer for its payload is made.
std::optional<Frame> readFrame(Ring& ring, std::uint64_t length, const wire::FrameLimits& limits);

}  // namespace crown::transport::shm
