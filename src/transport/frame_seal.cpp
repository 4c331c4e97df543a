#include "transport/frame_seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <climits>
#include <cstring>

#include "crown/common/error.h"
#include "crown/wire/frame.h"

namespace crown::transport {
namespace {

// EVP takes int lengths: feed a multi-GiB payload in pieces.
constexpr std::size_t kMaxPiece = std::size_t{1} << 30;

void check(int ok, const char* what) {
  if (ok != 1) throw Error(std::string("AES-256-GCM: ") + what + " failed");
}

}  // namespace

FrameCipher::FrameCipher(FabricSecurity security, const SessionKey& key, bool sealing)
    : security_(security), ctx_(EVP_CIPHER_CTX_new()), sealing_(sealing) {
  if (ctx_ == nullptr) throw Error("AES-256-GCM: out of memory");
  check(EVP_CipherInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key.data(), nullptr, sealing ? 1 : 0),
        "key setup");
}

FrameCipher::~FrameCipher() { EVP_CIPHER_CTX_free(ctx_); }

// The 96-bit nonce is 4 zero bytes and the frame's sequence number: unique
// per key, because every link direction has its own key (auth.h).
void FrameCipher::nextFrame() {
  std::uint8_t nonce[12] = {};
  std::uint64_t sequence = sequence_++;
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<std::uint8_t>(sequence >> (8 * i));
  check(EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, nonce, -1), "nonce setup");
}

void FrameCipher::authenticate(const void* data, std::size_t size) {
  auto* in = static_cast<const unsigned char*>(data);
  while (size > 0) {
    int piece = static_cast<int>(std::min(size, kMaxPiece));
    int ignored = 0;
    check(EVP_CipherUpdate(ctx_, nullptr, &ignored, in, piece), "authentication");
    in += piece;
    size -= static_cast<std::size_t>(piece);
  }
}

void FrameCipher::crypt(const void* data, void* result, std::size_t size) {
  auto* in = static_cast<const unsigned char*>(data);
  auto* out = static_cast<unsigned char*>(result);
  while (size > 0) {
    int piece = static_cast<int>(std::min(size, kMaxPiece));
    int written = 0;
    check(EVP_CipherUpdate(ctx_, out, &written, in, piece), "encryption");
    in += piece;
    out += piece;
    size -= static_cast<std::size_t>(piece);
  }
}

void FrameSealer::seal(std::string& head, const wire::Payload& payload, std::string& body,
                       FrameTag& tag) {
  nextFrame();
  if (security_ == FabricSecurity::kEncrypt) {
    authenticate(head.data(), wire::kFrameHeaderBytes);
    crypt(head.data() + wire::kFrameHeaderBytes, head.data() + wire::kFrameHeaderBytes,
          head.size() - wire::kFrameHeaderBytes);
    body.resize(payload.size());
    char* out = body.data();
    crypt(payload.head().data(), out, payload.head().size());
    out += payload.head().size();
    for (const auto& segment : payload.segments()) {
      crypt(segment.data, out, segment.size);
      out += segment.size;
    }
  } else {
    authenticate(head.data(), head.size());
    authenticate(payload.head().data(), payload.head().size());
    for (const auto& segment : payload.segments()) authenticate(segment.data, segment.size);
  }
  int ignored = 0;
  check(EVP_CipherFinal_ex(ctx_, nullptr, &ignored), "finish");
  check(EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kFrameTagBytes, tag.data()), "tag");
}

void FrameOpener::begin(const std::byte* header, std::size_t size) {
  nextFrame();
  authenticate(header, size);
}

void FrameOpener::update(std::byte* data, std::size_t size) {
  if (security_ == FabricSecurity::kEncrypt) {
    crypt(data, data, size);
  } else {
    authenticate(data, size);
  }
}

void FrameOpener::finish(const std::byte* tag) {
  check(EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kFrameTagBytes,
                            const_cast<std::byte*>(tag)),
        "tag");
  int ignored = 0;
  if (EVP_CipherFinal_ex(ctx_, nullptr, &ignored) != 1) {
    throw ProtocolError("a frame failed its integrity check (forged, replayed, reordered or cut)");
  }
}

}  // namespace crown::transport
