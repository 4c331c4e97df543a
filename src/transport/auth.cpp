#include "crown/transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <vector>

namespace crown::transport {
namespace {

template <class Array>
Array randomBytes() {
  Array out{};
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    throw Error("RAND_bytes failed: no secure random source");
  }
  return out;
}

void putU32(std::uint8_t* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

std::uint32_t getU32(const std::uint8_t* in) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return v;
}

// Distinct labels keep a client proof from ever being valid as a server proof.
Mac proof(const char* label, const Secret& secret, const Nonce& server, const Nonce& client,
          Rank clientRank) {
  std::vector<std::uint8_t> data(label, label + std::strlen(label));
  data.insert(data.end(), server.begin(), server.end());
  data.insert(data.end(), client.begin(), client.end());
  std::uint8_t rank[4];
  putU32(rank, clientRank);
  data.insert(data.end(), rank, rank + 4);
  return hmacSha256(secret, data);
}

}  // namespace

Nonce randomNonce() { return randomBytes<Nonce>(); }
Secret randomSecret() { return randomBytes<Secret>(); }

Mac hmacSha256(const Secret& key, std::span<const std::uint8_t> data) {
  Mac out{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(),
           out.data(), &length) == nullptr ||
      length != out.size()) {
    throw Error("HMAC-SHA256 failed");
  }
  return out;
}

bool macEqual(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Mac clientProof(const Secret& secret, const Nonce& server, const Nonce& client, Rank clientRank) {
  return proof("crown-client-v1", secret, server, client, clientRank);
}

Mac serverProof(const Secret& secret, const Nonce& server, const Nonce& client, Rank clientRank) {
  return proof("crown-server-v1", secret, server, client, clientRank);
}

std::array<std::uint8_t, kHelloBytes> encodeHello(const Nonce& serverNonce) {
  std::array<std::uint8_t, kHelloBytes> out{};
  putU32(out.data(), kAuthMagic);
  out[4] = static_cast<std::uint8_t>(kAuthVersion);
  out[5] = static_cast<std::uint8_t>(kAuthVersion >> 8);
  std::memcpy(out.data() + 6, serverNonce.data(), serverNonce.size());
  return out;
}

std::optional<Nonce> decodeHello(std::span<const std::uint8_t, kHelloBytes> bytes) {
  if (getU32(bytes.data()) != kAuthMagic) return std::nullopt;
  if ((bytes[4] | (bytes[5] << 8)) != kAuthVersion) return std::nullopt;
  Nonce nonce{};
  std::memcpy(nonce.data(), bytes.data() + 6, nonce.size());
  return nonce;
}

std::array<std::uint8_t, kClientAuthBytes> encodeClientAuth(const ClientAuth& auth) {
  std::array<std::uint8_t, kClientAuthBytes> out{};
  putU32(out.data(), auth.rank);
  std::memcpy(out.data() + 4, auth.nonce.data(), 32);
  std::memcpy(out.data() + 36, auth.proof.data(), 32);
  return out;
}

ClientAuth decodeClientAuth(std::span<const std::uint8_t, kClientAuthBytes> bytes) {
  ClientAuth auth;
  auth.rank = getU32(bytes.data());
  std::memcpy(auth.nonce.data(), bytes.data() + 4, 32);
  std::memcpy(auth.proof.data(), bytes.data() + 36, 32);
  return auth;
}

}  // namespace crown::transport
