#include "transport/frame_seal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

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

void authenticateWith(EVP_CIPHER_CTX* ctx, const void* data, std::size_t size) {
  auto* in = static_cast<const unsigned char*>(data);
  while (size > 0) {
    int piece = static_cast<int>(std::min(size, kMaxPiece));
    int ignored = 0;
    check(EVP_CipherUpdate(ctx, nullptr, &ignored, in, piece), "authentication");
    in += piece;
    size -= static_cast<std::size_t>(piece);
  }
}

void cryptWith(EVP_CIPHER_CTX* ctx, const void* data, void* result, std::size_t size) {
  auto* in = static_cast<const unsigned char*>(data);
  auto* out = static_cast<unsigned char*>(result);
  while (size > 0) {
    int piece = static_cast<int>(std::min(size, kMaxPiece));
    int written = 0;
    check(EVP_CipherUpdate(ctx, out, &written, in, piece), "encryption");
    in += piece;
    out += piece;
    size -= static_cast<std::size_t>(piece);
  }
}

void tagOf(EVP_CIPHER_CTX* ctx, FrameTag& tag) {
  int ignored = 0;
  check(EVP_CipherFinal_ex(ctx, nullptr, &ignored), "finish");
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag.data(), tag.size()),
      OSSL_PARAM_construct_end()};
  check(EVP_CIPHER_CTX_get_params(ctx, params), "tag");
}

}  // namespace

// A small frame's cost is mostly OpenSSL's per-call overhead, so the calls
// are the provider-native ones: the cipher fetched once, EVP_CipherInit_ex2
// for the nonce, and the tag through OSSL_PARAMs (the EVP_CIPHER_CTX_ctrl
// translation costs as much as the GHASH of a small frame).
FrameCipher::FrameCipher(FabricSecurity security, const SessionKey& key, bool sealing)
    : security_(security), ctx_(EVP_CIPHER_CTX_new()), sealing_(sealing) {
  static EVP_CIPHER* const aesGcm = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (ctx_ == nullptr || aesGcm == nullptr) throw Error("AES-256-GCM: not available");
  check(EVP_CipherInit_ex2(ctx_, aesGcm, key.data(), nullptr, sealing ? 1 : 0, nullptr),
        "key setup");
}

FrameCipher::~FrameCipher() { EVP_CIPHER_CTX_free(ctx_); }

// The 96-bit nonce is 4 zero bytes and the frame's sequence number: unique
// per key, because every link direction has its own key (auth.h).
void FrameCipher::nextFrame() {
  std::uint8_t nonce[12] = {};
  std::uint64_t sequence = sequence_++;
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<std::uint8_t>(sequence >> (8 * i));
  check(EVP_CipherInit_ex2(ctx_, nullptr, nullptr, nonce, sealing_ ? 1 : 0, nullptr),
        "nonce setup");
}

void FrameCipher::authenticate(const void* data, std::size_t size) {
  authenticateWith(ctx_, data, size);
}

void FrameCipher::crypt(const void* data, void* result, std::size_t size) {
  cryptWith(ctx_, data, result, size);
}

void FrameSealer::sealHead(std::string& head) {
  nextFrame();
  if (security_ == FabricSecurity::kEncrypt) {
    authenticate(head.data(), wire::kFrameHeaderBytes);
    crypt(head.data() + wire::kFrameHeaderBytes, head.data() + wire::kFrameHeaderBytes,
          head.size() - wire::kFrameHeaderBytes);
  } else {
    authenticate(head.data(), head.size());
  }
}

// The head goes through the sealer's own state, which is then copied for
// the payload: frames after this one need the sealer before it is done.
std::unique_ptr<StreamedSeal> FrameSealer::beginStreamed(std::string& head) {
  sealHead(head);
  EVP_CIPHER_CTX* copy = EVP_CIPHER_CTX_new();
  if (copy == nullptr || EVP_CIPHER_CTX_copy(copy, ctx_) != 1) {
    EVP_CIPHER_CTX_free(copy);
    throw Error("AES-256-GCM: copying the cipher state failed");
  }
  return std::make_unique<StreamedSeal>(copy, security_ == FabricSecurity::kEncrypt);
}

StreamedSeal::~StreamedSeal() { EVP_CIPHER_CTX_free(ctx_); }

void StreamedSeal::update(const wire::Payload& payload, std::size_t offset, std::size_t size,
                          char* out) {
  auto take = [&](const char* data, std::size_t length) {
    if (size == 0) return;
    if (offset >= length) {
      offset -= length;
      return;
    }
    std::size_t n = std::min(length - offset, size);
    if (encrypt_) {
      cryptWith(ctx_, data + offset, out, n);
      out += n;
    } else {
      authenticateWith(ctx_, data + offset, n);
    }
    offset = 0;
    size -= n;
  };
  take(payload.head().data(), payload.head().size());
  for (const auto& segment : payload.segments()) take(segment.data, segment.size);
}

void StreamedSeal::finish(FrameTag& tag) { tagOf(ctx_, tag); }

void FrameSealer::seal(std::string& head, const wire::Payload& payload, std::string& body,
                       FrameTag& tag) {
  sealHead(head);
  if (security_ == FabricSecurity::kEncrypt) {
    body.resize(payload.size());
    char* out = body.data();
    crypt(payload.head().data(), out, payload.head().size());
    out += payload.head().size();
    for (const auto& segment : payload.segments()) {
      crypt(segment.data, out, segment.size);
      out += segment.size;
    }
  } else {
    authenticate(payload.head().data(), payload.head().size());
    for (const auto& segment : payload.segments()) authenticate(segment.data, segment.size);
  }
  tagOf(ctx_, tag);
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
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, const_cast<std::byte*>(tag),
                                        kFrameTagBytes),
      OSSL_PARAM_construct_end()};
  check(EVP_CIPHER_CTX_set_params(ctx_, params), "tag");
  int ignored = 0;
  if (EVP_CipherFinal_ex(ctx_, nullptr, &ignored) != 1) {
    throw ProtocolError("a frame failed its integrity check (forged, replayed, reordered or cut)");
  }
}

}  // namespace crown::transport
