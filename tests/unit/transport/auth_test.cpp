#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "crown/transport/auth.h"

namespace crown::transport {
namespace {

std::string hex(const Mac& mac) {
  std::string out;
  char digit[3];
  for (auto byte : mac) {
    std::snprintf(digit, sizeof digit, "%02x", byte);
    out += digit;
  }
  return out;
}

TEST(Hmac, MatchesAnIndependentImplementation) {
  Secret key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i);
  const std::uint8_t data[] = {'c', 'r', 'o', 'w', 'n'};
  // Python: hmac.new(bytes(range(32)), b"crown", hashlib.sha256).hexdigest()
  EXPECT_EQ(hex(hmacSha256(key, data)),
            "4a1649b905a1d5128be44e8eb02bbb85331fdf8fe78f6e4a689e1a69e518d11c");
}

TEST(Handshake, TheRightSecretIsAccepted) {
  Secret secret = randomSecret();
  Nonce server = randomNonce(), client = randomNonce();
  EXPECT_TRUE(
      macEqual(clientProof(secret, server, client, 3), clientProof(secret, server, client, 3)));
  EXPECT_TRUE(
      macEqual(serverProof(secret, server, client, 3), serverProof(secret, server, client, 3)));
}

TEST(Handshake, AWrongSecretIsRejected) {
  Secret secret = randomSecret(), wrong = randomSecret();
  Nonce server = randomNonce(), client = randomNonce();
  EXPECT_FALSE(
      macEqual(clientProof(wrong, server, client, 3), clientProof(secret, server, client, 3)));
  EXPECT_FALSE(
      macEqual(serverProof(wrong, server, client, 3), serverProof(secret, server, client, 3)));
}

TEST(Handshake, ProofsAreBoundToNoncesRankAndDirection) {
  Secret secret = randomSecret();
  Nonce server = randomNonce(), client = randomNonce(), other = randomNonce();
  Mac proof = clientProof(secret, server, client, 3);
  EXPECT_FALSE(macEqual(proof, clientProof(secret, other, client, 3)));  // replay to another server
  EXPECT_FALSE(macEqual(proof, clientProof(secret, server, other, 3)));
  EXPECT_FALSE(macEqual(proof, clientProof(secret, server, client, 4)));  // claims another rank
  EXPECT_FALSE(macEqual(proof, serverProof(secret, server, client, 3)));  // reflected back
}

TEST(Handshake, MessagesRoundTrip) {
  Nonce nonce = randomNonce();
  auto hello = encodeHello(nonce);
  auto decoded = decodeHello(hello);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, nonce);
  hello[0] ^= 0xFF;
  EXPECT_FALSE(decodeHello(hello).has_value());

  ClientAuth auth{9, randomNonce(), {}};
  auth.proof[0] = 0xAB;
  ClientAuth back = decodeClientAuth(encodeClientAuth(auth));
  EXPECT_EQ(back.rank, 9u);
  EXPECT_EQ(back.nonce, auth.nonce);
  EXPECT_EQ(back.proof, auth.proof);
}

TEST(Random, NoncesDiffer) { EXPECT_NE(randomNonce(), randomNonce()); }

}  // namespace
}  // namespace crown::transport
