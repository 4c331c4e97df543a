// fuzz_handshake: the handshake's state machines (handshake.h), an honest
// client and server of one job whose three messages an attacker on the path
// may edit: the input is an XOR mask over the hello, the client's proof and
// the server's proof, in that order. Beyond "no crash" and "only
// ProtocolError", the handshake may complete only when nothing was edited,
// the client meant to reach that server, and both use the same security
// setting, and then both sides hold the same keys (SEC-1).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "crown/transport/handshake.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"

namespace {

using namespace crown::transport;

constexpr crown::Rank kJobSize = 4;
constexpr crown::Rank kServer = 1;

FabricSecurity securityOf(std::uint8_t byte) { return static_cast<FabricSecurity>(1 + byte % 3); }

// XORs the next bytes of the input into `message`; true when any bit changed.
template <std::size_t N>
bool edit(FuzzedDataProvider& input, std::array<std::uint8_t, N>& message) {
  std::array<std::uint8_t, N> mask{};
  input.ConsumeData(mask.data(), mask.size());  // short inputs leave zeros
  bool changed = false;
  for (std::size_t i = 0; i < N; ++i) {
    message[i] ^= mask[i];
    changed = changed || mask[i] != 0;
  }
  return changed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  crown::fuzz::HandshakeSettings settings;
  input.ConsumeData(&settings, sizeof settings);
  const Secret secret{42};
  FabricSecurity serverSecurity = securityOf(settings.serverSecurity);
  FabricSecurity clientSecurity = securityOf(settings.clientSecurity);
  crown::Rank target = settings.target % (kJobSize + 1);
  ServerHandshake server(secret, serverSecurity, kServer, kJobSize);
  ClientHandshake client(secret, clientSecurity, 0, target);
  bool honest = target == kServer && serverSecurity == clientSecurity;

  auto hello = server.hello();
  honest = !edit(input, hello) && honest;
  std::array<std::uint8_t, kClientAuthBytes> clientAuth{};
  try {
    clientAuth = client.onHello(hello);
  } catch (const crown::ProtocolError&) {
    CROWN_FUZZ_CHECK(!honest);
    return 0;
  }
  honest = !edit(input, clientAuth) && honest;
  LinkSession serverSession;
  std::array<std::uint8_t, kServerAuthBytes> answer{};
  try {
    answer = server.onClientAuth(clientAuth, serverSession);
  } catch (const crown::ProtocolError&) {
    CROWN_FUZZ_CHECK(!honest);
    return 0;
  }
  CROWN_FUZZ_CHECK(honest);  // no edited or misdirected handshake gets this far
  honest = !edit(input, answer);
  try {
    LinkSession clientSession = client.onServerAuth(answer);
    CROWN_FUZZ_CHECK(honest);
    CROWN_FUZZ_CHECK(clientSession.peer == kServer && serverSession.peer == 0);
    CROWN_FUZZ_CHECK(clientSession.sendKey == serverSession.receiveKey);
    CROWN_FUZZ_CHECK(clientSession.receiveKey == serverSession.sendKey);
  } catch (const crown::ProtocolError&) {
    CROWN_FUZZ_CHECK(!honest);
  }
  // Any further step is out of order.
  try {
    client.onHello(hello);
    CROWN_FUZZ_CHECK(false);
  } catch (const crown::ProtocolError&) {
  }
  return 0;
}
