#include "crown/transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "crown/common/env.h"

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

bool knownSecurity(std::uint8_t value) {
  return value >= static_cast<std::uint8_t>(FabricSecurity::kAuth) &&
         value <= static_cast<std::uint8_t>(FabricSecurity::kEncrypt);
}

// label | security | server rank | client rank: what a proof or a key is
// bound to besides the nonces. Distinct labels keep a client proof from ever
// being valid as a server proof, and either from being a key.
std::vector<std::uint8_t> bindingBytes(const char* label, const LinkBinding& link,
                                       bool withNonces) {
  std::vector<std::uint8_t> data(label, label + std::strlen(label));
  data.push_back(static_cast<std::uint8_t>(link.security));
  std::uint8_t ranks[8];
  putU32(ranks, link.server);
  putU32(ranks + 4, link.client);
  data.insert(data.end(), ranks, ranks + 8);
  if (withNonces) {
    data.insert(data.end(), link.serverNonce.begin(), link.serverNonce.end());
    data.insert(data.end(), link.clientNonce.begin(), link.clientNonce.end());
  }
  return data;
}

}  // namespace

std::string_view securityName(FabricSecurity security) {
  switch (security) {
    case FabricSecurity::kAuth:
      return "auth";
    case FabricSecurity::kIntegrity:
      return "integrity";
    case FabricSecurity::kEncrypt:
      return "encrypt";
  }
  return "unknown";
}

FabricSecurity fabricSecurityFromEnv() {
  std::string value =
      env::choice("CROWN_FABRIC_SECURITY", "integrity", {"auth", "integrity", "encrypt"});
  if (value == "auth") return FabricSecurity::kAuth;
  if (value == "encrypt") return FabricSecurity::kEncrypt;
  return FabricSecurity::kIntegrity;
}

Nonce randomNonce() { return randomBytes<Nonce>(); }
Secret randomSecret() { return randomBytes<Secret>(); }

Mac hmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data) {
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

Mac clientProof(const Secret& secret, const LinkBinding& link) {
  return hmacSha256(secret, bindingBytes("crown-client-v2", link, true));
}

Mac serverProof(const Secret& secret, const LinkBinding& link) {
  return hmacSha256(secret, bindingBytes("crown-server-v2", link, true));
}

SessionKeys deriveSessionKeys(const Secret& secret, const LinkBinding& link) {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), &EVP_PKEY_CTX_free);
  std::vector<std::uint8_t> salt(link.serverNonce.begin(), link.serverNonce.end());
  salt.insert(salt.end(), link.clientNonce.begin(), link.clientNonce.end());
  std::vector<std::uint8_t> info = bindingBytes("crown-link-keys-v2", link, false);
  std::array<std::uint8_t, 64> okm{};
  std::size_t length = okm.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt.data(), static_cast<int>(salt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), secret.data(), static_cast<int>(secret.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info.data(), static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), okm.data(), &length) <= 0 || length != okm.size()) {
    throw Error("HKDF-SHA256 failed");
  }
  SessionKeys keys;
  std::memcpy(keys.clientToServer.data(), okm.data(), 32);
  std::memcpy(keys.serverToClient.data(), okm.data() + 32, 32);
  OPENSSL_cleanse(okm.data(), okm.size());
  return keys;
}

std::array<std::uint8_t, kHelloBytes> encodeHello(const Hello& hello) {
  std::array<std::uint8_t, kHelloBytes> out{};
  putU32(out.data(), kAuthMagic);
  out[4] = static_cast<std::uint8_t>(kAuthVersion);
  out[5] = static_cast<std::uint8_t>(kAuthVersion >> 8);
  out[6] = static_cast<std::uint8_t>(hello.security);
  putU32(out.data() + 7, hello.server);
  std::memcpy(out.data() + 11, hello.nonce.data(), hello.nonce.size());
  return out;
}

std::optional<Hello> decodeHello(std::span<const std::uint8_t, kHelloBytes> bytes) {
  if (getU32(bytes.data()) != kAuthMagic) return std::nullopt;
  if ((bytes[4] | (bytes[5] << 8)) != kAuthVersion) return std::nullopt;
  if (!knownSecurity(bytes[6])) return std::nullopt;
  Hello hello;
  hello.security = static_cast<FabricSecurity>(bytes[6]);
  hello.server = getU32(bytes.data() + 7);
  std::memcpy(hello.nonce.data(), bytes.data() + 11, hello.nonce.size());
  return hello;
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
