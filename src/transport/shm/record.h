// A frame as a record of a shared-memory ring (shm_backend.h):
// [u32 envelope bytes][envelope][payload], written as parts so that the
// payload's segments go into the ring without being joined first; or, for a
// large payload, a record that lends it (lending.h).
#pragma once

#include <sys/types.h>

#include <chrono>
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

/// Writes `message` into `ring`: a large payload lent (lending.h) unless
/// the reader refused lending, then copied. Returns once the payload's
/// memory is free again; kTimedOut or kClosed (the ring then closed) when
/// the reader did not take it by `deadline`.
Ring::Result writeFrame(Ring& ring, const OutMessage& message,
                        std::chrono::steady_clock::time_point deadline);

enum class Taken {
  kFrame,   ///< the frame is read
  kAgain,   ///< its payload was lent from memory this process cannot read: the
            ///< writer sends the frame again, copied, as the next record
  kClosed,  ///< the ring closed first (the writer gave up on a lent payload)
};

/// Reads the frame of the record of `length` bytes begun on `ring`
/// (Ring::begin) into `frame`, its payload straight into a buffer of its
/// own (no copy after, no memset before), a lent one copied from process
/// `lender`. Throws ProtocolError saying why when the record breaks its
/// format or `limits`, before a buffer for its payload is made.
Taken readFrame(Ring& ring, std::uint64_t length, const wire::FrameLimits& limits, pid_t lender,
                Frame& frame);

}  // namespace crown::transport::shm
