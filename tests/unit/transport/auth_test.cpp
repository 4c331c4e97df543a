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

LinkBinding someLink() {
  return {FabricSecurity::kIntegrity, 1, 3, randomNonce(), randomNonce()};
}

TEST(Handshake, TheRightSecretIsAccepted) {
  Secret secret = randomSecret();
  LinkBinding link = someLink();
  EXPECT_TRUE(macEqual(clientProof(secret, link), clientProof(secret, link)));
  EXPECT_TRUE(macEqual(serverProof(secret, link), serverProof(secret, link)));
}

TEST(Handshake, AWrongSecretIsRejected) {
  Secret secret = randomSecret(), wrong = randomSecret();
  LinkBinding link = someLink();
  EXPECT_FALSE(macEqual(clientProof(wrong, link), clientProof(secret, link)));
  EXPECT_FALSE(macEqual(serverProof(wrong, link), serverProof(secret, link)));
}

// Every field of the binding changes the proof, so neither side's answer is
// worth anything on another link (the relay of issue 10).
TEST(Handshake, ProofsAreBoundToBothRanksBothNoncesSecurityAndDirection) {
  Secret secret = randomSecret();
  LinkBinding link = someLink();
  Mac proof = clientProof(secret, link);
  auto differs = [&](auto change) {
    LinkBinding other = link;
    change(other);
    return !macEqual(proof, clientProof(secret, other));
  };
  EXPECT_TRUE(differs([](LinkBinding& l) { l.serverNonce = randomNonce(); }));
  EXPECT_TRUE(differs([](LinkBinding& l) { l.clientNonce = randomNonce(); }));
  EXPECT_TRUE(differs([](LinkBinding& l) { l.client = 4; }));
  EXPECT_TRUE(differs([](LinkBinding& l) { l.server = 2; }));  // meant for another server
  EXPECT_TRUE(differs([](LinkBinding& l) { l.security = FabricSecurity::kAuth; }));  // downgrade
  EXPECT_FALSE(macEqual(proof, serverProof(secret, link)));  // reflected back
}

TEST(Handshake, SessionKeysDifferPerDirectionAndPerLink) {
  Secret secret = randomSecret();
  LinkBinding link = someLink();
  SessionKeys keys = deriveSessionKeys(secret, link);
  EXPECT_NE(keys.clientToServer, keys.serverToClient);
  SessionKeys again = deriveSessionKeys(secret, link);
  EXPECT_EQ(keys.clientToServer, again.clientToServer);
  LinkBinding other = link;
  other.clientNonce = randomNonce();
  EXPECT_NE(deriveSessionKeys(secret, other).clientToServer, keys.clientToServer);
  EXPECT_NE(deriveSessionKeys(randomSecret(), link).clientToServer, keys.clientToServer);
}

TEST(Handshake, MessagesRoundTrip) {
  Hello hello{FabricSecurity::kEncrypt, 7, randomNonce()};
  auto bytes = encodeHello(hello);
  auto decoded = decodeHello(bytes);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->nonce, hello.nonce);
  EXPECT_EQ(decoded->server, 7u);
  EXPECT_EQ(decoded->security, FabricSecurity::kEncrypt);
  auto badMagic = bytes;
  badMagic[0] ^= 0xFF;
  EXPECT_FALSE(decodeHello(badMagic).has_value());
  auto badSecurity = bytes;
  badSecurity[6] = 9;
  EXPECT_FALSE(decodeHello(badSecurity).has_value());

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
