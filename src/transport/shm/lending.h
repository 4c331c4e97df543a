// Lent payloads (issue 14, bulk at memory speed): a large frame's payload
// is not copied through the ring. Its record names where the payload's
// pieces lie in the writer's memory, and the reader copies them straight
// into the frame's buffer with process_vm_readv (cross-memory attach, as
// Open MPI's shared-memory transport does): one copy instead of two, and
// the ring stays free for small frames. The writer waits until the reader
// gives the memory back (Ring::awaitReturn), so a send still returns only
// once its bytes have left.
//
// The reader reads only the process at the other end of its authenticated
// socket (its pid from SO_PEERCRED, never from the record), so SEC-1 holds.
// Where the kernel refuses it (another pid namespace, a ptrace policy,
// seccomp), the reader refuses lending on that ring and the writer sends
// the frame again, copied, and copies every frame after it.
//
// A record that lends: [u32 envelope bytes | kLentBit][envelope]
// [u32 pieces][pieces x (u64 address, u64 bytes)], in the writer's byte order.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "crown/transport/transport.h"
#include "crown/wire/frame.h"

namespace crown::transport::shm {

/// Set in a record's envelope-length word when the record lends its payload.
constexpr std::uint32_t kLentBit = 1u << 31;
/// The most pieces a lent payload has (the kernel's IOV_MAX): a payload of
/// more segments is copied instead.
constexpr std::size_t kMaxLentPieces = 1024;

/// Payloads from this many bytes up are lent: CROWN_SHM_LEND_BYTES (0 never
/// lends), by default the size from which lending measured faster here.
std::size_t lendFromBytes();

/// Whether `message`'s payload is lent rather than copied.
bool lends(const OutMessage& message);

/// The one part of the record that lends `message`'s payload, in `head`;
/// `message` must stay as it is until the reader gives its memory back.
std::vector<std::span<const std::byte>> lentRecordParts(const OutMessage& message,
                                                        std::string& head);

/// Copies the payload that `descriptor` (the record after its envelope)
/// names out of process `lender`, into a buffer of its own; nullopt when
/// the kernel does not let this process read that one (the writer then
/// sends the frame again, copied). Throws ProtocolError when the descriptor
/// breaks its format or `limits`, or names memory the lender does not have.
std::optional<wire::Bytes> copyLent(pid_t lender, std::span<const std::byte> descriptor,
                                    const wire::FrameLimits& limits);

/// The most bytes a well-formed descriptor has.
constexpr std::size_t kMaxDescriptorBytes = 4 + 16 * kMaxLentPieces;

}  // namespace crown::transport::shm
