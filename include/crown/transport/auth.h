// Link authentication (SEC-1): a mutual HMAC-SHA256 challenge-response over
// the job secret, run before any frame is accepted. The secret itself never
// crosses the link; only nonces and MACs do.
//
//   server -> client  Hello       magic u32 'CRAU' | version u16 | server nonce[32]
//   client -> server  ClientAuth  client rank u32 | client nonce[32] | clientProof[32]
//   server -> client  ServerAuth  serverProof[32]
//
// Pure functions over OpenSSL's libcrypto; any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "crown/common/error.h"

namespace crown::transport {

using Secret = std::array<std::uint8_t, 32>;
using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

constexpr std::uint32_t kAuthMagic = 0x55415243;  // "CRAU"
constexpr std::uint16_t kAuthVersion = 1;
constexpr std::size_t kHelloBytes = 4 + 2 + 32;
constexpr std::size_t kClientAuthBytes = 4 + 32 + 32;
constexpr std::size_t kServerAuthBytes = 32;

/// Cryptographically random bytes (RAND_bytes); throws crown::Error if the RNG fails.
Nonce randomNonce();
Secret randomSecret();

Mac hmacSha256(const Secret& key, std::span<const std::uint8_t> data);
/// Constant-time comparison.
bool macEqual(const Mac& a, const Mac& b);

/// What the connecting side proves: it knows the secret, for this server nonce and its rank.
Mac clientProof(const Secret& secret, const Nonce& server, const Nonce& client, Rank clientRank);
/// What the accepting side proves back, bound to both nonces.
Mac serverProof(const Secret& secret, const Nonce& server, const Nonce& client, Rank clientRank);

struct ClientAuth {
  Rank rank = 0;
  Nonce nonce{};
  Mac proof{};
};

std::array<std::uint8_t, kHelloBytes> encodeHello(const Nonce& serverNonce);
/// The server nonce, or nullopt when the bytes are not a Hello of this version.
std::optional<Nonce> decodeHello(std::span<const std::uint8_t, kHelloBytes> bytes);
std::array<std::uint8_t, kClientAuthBytes> encodeClientAuth(const ClientAuth& auth);
ClientAuth decodeClientAuth(std::span<const std::uint8_t, kClientAuthBytes> bytes);

}  // namespace crown::transport
