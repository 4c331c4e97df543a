// The handshake's state machines (handshake.h) against each other and
// against the relay, reflection and mismatch of issue 10 (SEC-1).
#include <gtest/gtest.h>

#include "crown/transport/handshake.h"

namespace crown::transport {
namespace {

constexpr Rank kJobSize = 4;

struct Completed {
  LinkSession client;
  LinkSession server;
};

Completed handshake(ClientHandshake& client, ServerHandshake& server) {
  Completed done;
  auto clientAuth = client.onHello(server.hello());
  auto answer = server.onClientAuth(clientAuth, done.server);
  done.client = client.onServerAuth(answer);
  return done;
}

TEST(HandshakeStates, BothSidesAgreeOnPeersAndKeys) {
  Secret secret = randomSecret();
  ClientHandshake client(secret, FabricSecurity::kIntegrity, 0, 2);
  ServerHandshake server(secret, FabricSecurity::kIntegrity, 2, kJobSize);
  Completed done = handshake(client, server);
  EXPECT_EQ(done.client.peer, 2u);
  EXPECT_EQ(done.server.peer, 0u);
  EXPECT_EQ(done.client.sendKey, done.server.receiveKey);
  EXPECT_EQ(done.client.receiveKey, done.server.sendKey);
  EXPECT_NE(done.client.sendKey, done.client.receiveKey);
}

TEST(HandshakeStates, AClientWithAnotherSecretIsRefused) {
  ClientHandshake client(randomSecret(), FabricSecurity::kIntegrity, 0, 1);
  ServerHandshake server(randomSecret(), FabricSecurity::kIntegrity, 1, kJobSize);
  auto clientAuth = client.onHello(server.hello());
  LinkSession session;
  EXPECT_THROW(server.onClientAuth(clientAuth, session), ProtocolError);
}

TEST(HandshakeStates, AServerWithoutTheSecretIsRefused) {
  Secret secret = randomSecret();
  ClientHandshake client(secret, FabricSecurity::kIntegrity, 0, 1);
  ServerHandshake impostor(randomSecret(), FabricSecurity::kIntegrity, 1, kJobSize);
  client.onHello(impostor.hello());
  // The impostor cannot check the client's proof, nor make its own.
  std::array<std::uint8_t, kServerAuthBytes> guess{};
  EXPECT_THROW(client.onServerAuth(guess), ProtocolError);
}

// The attack of issue 10: rank 0 connects to the address of dead rank 3,
// where an impostor listens. The impostor opens a link to live rank 1 and
// relays: 1's hello to 0, 0's answer to 1, 1's answer back to 0.
TEST(HandshakeStates, ARelayedHandshakeIsRefused) {
  Secret secret = randomSecret();
  ClientHandshake victim(secret, FabricSecurity::kIntegrity, 0, 3);
  ServerHandshake relayed(secret, FabricSecurity::kIntegrity, 1, kJobSize);
  // Relayed as it is, the hello names rank 1: the victim sees at once that
  // this is not the rank it meant to reach.
  EXPECT_THROW(victim.onHello(relayed.hello()), ProtocolError);
  // Rewritten to name rank 3, the hello passes, but the victim's proof is
  // bound to server rank 3, so rank 1 refuses it.
  ClientHandshake victim2(secret, FabricSecurity::kIntegrity, 0, 3);
  auto bytes = relayed.hello();
  auto hello = decodeHello(bytes);
  ASSERT_TRUE(hello);
  hello->server = 3;
  auto clientAuth = victim2.onHello(encodeHello(*hello));
  LinkSession session;
  EXPECT_THROW(relayed.onClientAuth(clientAuth, session), ProtocolError);
}

// A client's proof sent back to it as a server's proof (a reflection) fails:
// the two directions have different labels.
TEST(HandshakeStates, AReflectedProofIsRefused) {
  Secret secret = randomSecret();
  ClientHandshake client(secret, FabricSecurity::kIntegrity, 0, 1);
  ServerHandshake server(secret, FabricSecurity::kIntegrity, 1, kJobSize);
  auto clientAuth = client.onHello(server.hello());
  std::array<std::uint8_t, kServerAuthBytes> reflected{};
  std::copy(clientAuth.begin() + 36, clientAuth.end(), reflected.begin());
  EXPECT_THROW(client.onServerAuth(reflected), ProtocolError);
}

TEST(HandshakeStates, AMismatchedSecuritySettingIsNamed) {
  Secret secret = randomSecret();
  ClientHandshake client(secret, FabricSecurity::kEncrypt, 0, 1);
  ServerHandshake server(secret, FabricSecurity::kAuth, 1, kJobSize);
  try {
    client.onHello(server.hello());
    FAIL() << "a mismatch was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("CROWN_FABRIC_SECURITY=auth"), std::string::npos) << e.what();
  }
}

TEST(HandshakeStates, AClientClaimingNoRankOfTheJobIsRefused) {
  Secret secret = randomSecret();
  ClientHandshake client(secret, FabricSecurity::kIntegrity, kJobSize, 1);
  ServerHandshake server(secret, FabricSecurity::kIntegrity, 1, kJobSize);
  auto clientAuth = client.onHello(server.hello());
  LinkSession session;
  EXPECT_THROW(server.onClientAuth(clientAuth, session), ProtocolError);
}

TEST(HandshakeStates, StepsOutOfOrderAreRefused) {
  Secret secret = randomSecret();
  ClientHandshake client(secret, FabricSecurity::kIntegrity, 0, 1);
  std::array<std::uint8_t, kServerAuthBytes> early{};
  EXPECT_THROW(client.onServerAuth(early), ProtocolError);
  ServerHandshake server(secret, FabricSecurity::kIntegrity, 1, kJobSize);
  handshake(client, server);
  EXPECT_THROW(client.onHello(server.hello()), ProtocolError);
}

}  // namespace
}  // namespace crown::transport
