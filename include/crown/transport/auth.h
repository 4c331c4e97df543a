// Link authentication (SEC-1): a mutual HMAC-SHA256 challenge-response over
// the job secret, run before any frame is accepted. The secret itself never
// crosses the link; only nonces and MACs do.
//
//   server -> client  Hello       magic u32 'CRAU' | version u16 | security u8 |
//                                 server rank u32 | server nonce[32]
//   client -> server  ClientAuth  client rank u32 | client nonce[32] | clientProof[32]
//   server -> client  ServerAuth  serverProof[32]
//
// Each proof covers the security setting, both ranks, both nonces and its
// direction (LinkBinding), so neither answer is worth anything on another
// link: an impostor that relays rank A's hello to rank B cannot pass B's
// answer off as that of the rank A meant to reach. The per-link session keys
// come from the same binding (HKDF), and protect every frame that follows
// (frame_seal.h). Pure functions over OpenSSL's libcrypto; any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "crown/common/error.h"

namespace crown::transport {

using Secret = std::array<std::uint8_t, 32>;
using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;
using SessionKey = std::array<std::uint8_t, 32>;

/// What protects the frames of a link after its handshake
/// (CROWN_FABRIC_SECURITY). Every setting authenticates both ends.
enum class FabricSecurity : std::uint8_t {
  kAuth = 1,       ///< the handshake only: frames carry no tag
  kIntegrity = 2,  ///< every frame carries an AES-256-GCM tag (GMAC), sent in clear
  kEncrypt = 3,    ///< every frame's envelope and payload are AES-256-GCM encrypted
};

std::string_view securityName(FabricSecurity security);
/// CROWN_FABRIC_SECURITY (auth|integrity|encrypt), integrity when unset;
/// throws ConfigError naming the accepted values otherwise.
FabricSecurity fabricSecurityFromEnv();

constexpr std::uint32_t kAuthMagic = 0x55415243;  // "CRAU"
constexpr std::uint16_t kAuthVersion = 2;
constexpr std::size_t kHelloBytes = 4 + 2 + 1 + 4 + 32;
constexpr std::size_t kClientAuthBytes = 4 + 32 + 32;
constexpr std::size_t kServerAuthBytes = 32;

/// Cryptographically random bytes (RAND_bytes); throws crown::Error if the RNG fails.
Nonce randomNonce();
Secret randomSecret();

Mac hmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data);
/// Constant-time comparison.
bool macEqual(const Mac& a, const Mac& b);

/// Everything one link's handshake agrees on.
struct LinkBinding {
  FabricSecurity security = FabricSecurity::kIntegrity;
  Rank server = 0;
  Rank client = 0;
  Nonce serverNonce{};
  Nonce clientNonce{};
};

/// What the connecting side proves: it knows the secret, on this link.
Mac clientProof(const Secret& secret, const LinkBinding& link);
/// What the accepting side proves back; a different label, so a client's
/// proof reflected back is no server proof.
Mac serverProof(const Secret& secret, const LinkBinding& link);

struct SessionKeys {
  SessionKey clientToServer{};
  SessionKey serverToClient{};
};
/// HKDF-SHA256 over the job secret, salted with both nonces and bound to
/// the rest of the link: fresh keys for every link and direction.
SessionKeys deriveSessionKeys(const Secret& secret, const LinkBinding& link);

struct Hello {
  FabricSecurity security = FabricSecurity::kIntegrity;
  Rank server = 0;
  Nonce nonce{};
};

struct ClientAuth {
  Rank rank = 0;
  Nonce nonce{};
  Mac proof{};
};

std::array<std::uint8_t, kHelloBytes> encodeHello(const Hello& hello);
/// The hello, or nullopt when the bytes are not a crown hello of this version
/// with a known security setting.
std::optional<Hello> decodeHello(std::span<const std::uint8_t, kHelloBytes> bytes);
std::array<std::uint8_t, kClientAuthBytes> encodeClientAuth(const ClientAuth& auth);
ClientAuth decodeClientAuth(std::span<const std::uint8_t, kClientAuthBytes> bytes);

}  // namespace crown::transport
