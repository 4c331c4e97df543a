// Integrity, and optionally secrecy, of every frame after the handshake
// (SEC-1): AES-256-GCM under the link's session key for one direction, with
// the frame's place in that direction's stream as the nonce. The sequence
// number is never sent: both sides count, so a frame forged, replayed,
// reordered, cut in or dropped fails the next tag check, and the reader
// closes the link.
//
//   integrity  the whole frame is authenticated data (GMAC); the bytes stay
//              where they lie, so payload segments still go out uncopied.
//   encrypt    the fixed header is authenticated data, the envelope and
//              payload are encrypted (the payload into a new buffer).
//
// A tag of kFrameTagBytes follows each frame. One sealer per link direction,
// used in wire order (the link holds its mutex); one opener per reader.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "crown/transport/auth.h"
#include "crown/wire/payload.h"

struct evp_cipher_ctx_st;

namespace crown::transport {

constexpr std::size_t kFrameTagBytes = 16;
using FrameTag = std::array<char, kFrameTagBytes>;

class FrameCipher {
 public:
  FrameCipher(FabricSecurity security, const SessionKey& key, bool sealing);
  ~FrameCipher();
  FrameCipher(const FrameCipher&) = delete;
  FrameCipher& operator=(const FrameCipher&) = delete;

  FabricSecurity security() const { return security_; }

 protected:
  void nextFrame();  // sets the next frame's nonce
  void authenticate(const void* data, std::size_t size);
  void crypt(const void* in, void* out, std::size_t size);

  FabricSecurity security_;
  evp_cipher_ctx_st* ctx_;
  std::uint64_t sequence_ = 0;
  bool sealing_;
};

class FrameSealer : public FrameCipher {
 public:
  FrameSealer(FabricSecurity security, const SessionKey& key) : FrameCipher(security, key, true) {}

  /// Seals the next frame: `head` is its header and envelope. Under encrypt
  /// the envelope is encrypted in place and the payload's ciphertext is put
  /// in `body`, which then goes on the wire instead of the payload.
  void seal(std::string& head, const wire::Payload& payload, std::string& body, FrameTag& tag);
};

class FrameOpener : public FrameCipher {
 public:
  FrameOpener(FabricSecurity security, const SessionKey& key) : FrameCipher(security, key, false) {}

  /// The next frame starts with this fixed header (checked, never secret).
  void begin(const std::byte* header, std::size_t size);
  /// Its envelope and payload bytes, in order; decrypted in place under encrypt.
  void update(std::byte* data, std::size_t size);
  /// Throws ProtocolError unless `tag` is the frame's.
  void finish(const std::byte* tag);
};

}  // namespace crown::transport
