// The input layout of each fuzzer, shared with the seed generator: a block
// of settings, then the bytes under test. Any settings bytes are valid; the
// fuzzer maps them into range. Shorter inputs read as zero settings.
#pragma once

#include <cstdint>

#include "crown/transport/auth.h"

namespace crown::fuzz {

/// fuzz_frame: a byte stream that a FrameReader splits into frames.
struct FrameSettings {
  std::uint16_t bufferBytes = 0;  ///< the reader's buffer, 1 + this % 4096
  std::uint16_t maxChunk = 0;     ///< reads are 1 .. 1 + this % 4096 bytes
  std::uint32_t chunkSeed = 0;    ///< picks the read sizes
  std::uint8_t security = 0;      ///< transport::FabricSecurity 1 + this % 3
};

/// The session key of fuzz_frame's sealed streams (integrity, encrypt).
inline const transport::SessionKey kFrameKey{7};

/// fuzz_archive: one crown archive of the message type at this index of
/// ArchiveTypes (archive_types.h), modulo their number.
struct ArchiveSettings {
  std::uint8_t type = 0;
};

/// fuzz_cast: a CastMessage as a hop receives it.
struct CastSettings {
  std::uint16_t worldSize = 0;  ///< ranks in the job: 1 + this % 4096
  std::uint16_t here = 0;       ///< the receiving rank: this % world size
};

/// fuzz_handshake: an honest client and server, then masks over their messages.
struct HandshakeSettings {
  std::uint8_t serverSecurity = 0;  ///< transport::FabricSecurity 1 + this % 3
  std::uint8_t clientSecurity = 0;  ///< the same for the client
  std::uint8_t target = 0;          ///< the rank the client means to reach: this % 5 (the server is 1)
};

}  // namespace crown::fuzz
