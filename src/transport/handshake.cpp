#include "crown/transport/handshake.h"

#include <string>

namespace crown::transport {

ClientHandshake::ClientHandshake(const Secret& secret, FabricSecurity security, Rank self,
                                 Rank server)
    : secret_(secret) {
  link_.security = security;
  link_.client = self;
  link_.server = server;
}

std::array<std::uint8_t, kClientAuthBytes> ClientHandshake::onHello(
    std::span<const std::uint8_t, kHelloBytes> bytes) {
  if (step_ != Step::kAwaitHello) throw ProtocolError("a second hello in one handshake");
  auto hello = decodeHello(bytes);
  if (!hello) throw ProtocolError("peer did not greet with a crown hello of version 2");
  if (hello->server != link_.server) {
    // A stale address: the rank that listened here is gone and another
    // process holds its port or socket name.
    throw ProtocolError("reached a process that says it is rank " + std::to_string(hello->server) +
                        ", not rank " + std::to_string(link_.server));
  }
  if (hello->security != link_.security) {
    throw ProtocolError("rank " + std::to_string(link_.server) + " uses CROWN_FABRIC_SECURITY=" +
                        std::string(securityName(hello->security)) + " and this rank " +
                        std::string(securityName(link_.security)) +
                        ": set the same value on every rank");
  }
  link_.serverNonce = hello->nonce;
  link_.clientNonce = randomNonce();
  step_ = Step::kAwaitServerAuth;
  return encodeClientAuth({link_.client, link_.clientNonce, clientProof(secret_, link_)});
}

LinkSession ClientHandshake::onServerAuth(std::span<const std::uint8_t, kServerAuthBytes> bytes) {
  if (step_ != Step::kAwaitServerAuth) throw ProtocolError("a server proof before the hello");
  Mac answer{};
  std::copy(bytes.begin(), bytes.end(), answer.begin());
  if (!macEqual(answer, serverProof(secret_, link_))) {
    throw ProtocolError("peer failed to prove it knows the job secret");
  }
  step_ = Step::kDone;
  SessionKeys keys = deriveSessionKeys(secret_, link_);
  return {link_.server, link_.security, keys.clientToServer, keys.serverToClient};
}

ServerHandshake::ServerHandshake(const Secret& secret, FabricSecurity security, Rank self,
                                 Rank size)
    : secret_(secret), size_(size) {
  link_.security = security;
  link_.server = self;
  link_.serverNonce = randomNonce();
}

std::array<std::uint8_t, kHelloBytes> ServerHandshake::hello() const {
  return encodeHello({link_.security, link_.server, link_.serverNonce});
}

std::array<std::uint8_t, kServerAuthBytes> ServerHandshake::onClientAuth(
    std::span<const std::uint8_t, kClientAuthBytes> bytes, LinkSession& session) {
  if (done_) throw ProtocolError("a second client proof in one handshake");
  ClientAuth auth = decodeClientAuth(bytes);
  if (auth.rank >= size_) {
    throw ProtocolError("claims rank " + std::to_string(auth.rank) + " of a job of " +
                        std::to_string(size_));
  }
  link_.client = auth.rank;
  link_.clientNonce = auth.nonce;
  if (!macEqual(auth.proof, clientProof(secret_, link_))) {
    throw ProtocolError("authentication failed");
  }
  done_ = true;
  SessionKeys keys = deriveSessionKeys(secret_, link_);
  session = {link_.client, link_.security, keys.serverToClient, keys.clientToServer};
  return serverProof(secret_, link_);
}

}  // namespace crown::transport
