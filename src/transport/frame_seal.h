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
//
// A frame whose payload is over kStreamedSealBytes is sealed as it is
// written (StreamedSeal): the writer seals a chunk, writes it, seals the
// next, so the seal overlaps the transfer instead of preceding it, and
// under encrypt only one chunk of ciphertext exists at a time. The bytes
// on the wire are the same as if it had been sealed at once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "crown/transport/auth.h"
#include "crown/wire/payload.h"

struct evp_cipher_ctx_st;

namespace crown::transport {

constexpr std::size_t kFrameTagBytes = 16;
using FrameTag = std::array<char, kFrameTagBytes>;
/// Payloads above this are sealed a chunk of this size at a time as they are written.
constexpr std::size_t kStreamedSealBytes = 1 << 20;

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

/// One frame's seal in progress, with its own cipher state: frames after it
/// are sealed meanwhile by the sealer. Used by one writer at a time.
class StreamedSeal {
 public:
  explicit StreamedSeal(evp_cipher_ctx_st* ctx, bool encrypt) : ctx_(ctx), encrypt_(encrypt) {}
  ~StreamedSeal();
  StreamedSeal(const StreamedSeal&) = delete;
  StreamedSeal& operator=(const StreamedSeal&) = delete;

  /// Seals the payload's bytes [offset, offset + size), which follow the
  /// ones sealed before; under encrypt their ciphertext goes to `out`.
  void update(const wire::Payload& payload, std::size_t offset, std::size_t size, char* out);
  void finish(FrameTag& tag);

 private:
  evp_cipher_ctx_st* ctx_;
  bool encrypt_;
};

class FrameSealer : public FrameCipher {
 public:
  FrameSealer(FabricSecurity security, const SessionKey& key) : FrameCipher(security, key, true) {}

  /// Seals the next frame: `head` is its header and envelope. Under encrypt
  /// the envelope is encrypted in place and the payload's ciphertext is put
  /// in `body`, which then goes on the wire instead of the payload.
  void seal(std::string& head, const wire::Payload& payload, std::string& body, FrameTag& tag);
  /// Takes the next frame's place and seals its head as seal() does; its
  /// payload is then sealed through the StreamedSeal.
  std::unique_ptr<StreamedSeal> beginStreamed(std::string& head);

 private:
  void sealHead(std::string& head);
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
