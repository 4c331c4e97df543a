// Issue 10's attacks on real TCP links, through a relay that knows no
// secret (support/tcp_relay.h). Before the fix the handshake proved nothing
// about the server's rank and frames carried no tag: both tests delivered.
#include <gtest/gtest.h>

#include "crown/transport/transport.h"
#include "support/tcp_relay.h"
#include "support/transport_inbox.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;
constexpr const char* kMarker = "PAYLOAD-MARKER";

AsioOptions optionsFor(Rank rank, Rank size, const Secret& secret, FabricSecurity security) {
  AsioOptions options = crown::testing::loopbackOptions(rank, size, secret);
  options.security = security;
  options.connectTimeout = 2s;
  options.authTimeout = 2s;
  return options;
}

struct Node : crown::testing::TransportInbox {
  Node(Rank rank, Rank size, const Secret& secret, FabricSecurity security)
      : transport(makeTcpBackend(optionsFor(rank, size, secret, security))) {}
  void send(Rank to, std::string payload) {
    transport->send(to, crown::testing::testMessage(to, std::move(payload)));
  }
  std::unique_ptr<Backend> transport;
};

// Rank 2 died; an impostor holds its port and relays to live rank 1. Rank 0
// still sends to "rank 2": it must not reach rank 1, nor believe it did.
TEST(RelayAttack, AHandshakeRelayedToAnotherRankIsRefused) {
  Secret secret = randomSecret();
  Node a(0, 3, secret, FabricSecurity::kIntegrity), b(1, 3, secret, FabricSecurity::kIntegrity);
  crown::testing::TcpRelay impostor(b.transport->address());
  std::vector<std::string> peers{a.transport->address(), b.transport->address(),
                                 impostor.address()};
  a.transport->start(peers, a.callbacks());
  b.transport->start(peers, b.callbacks());
  a.send(2, "meant for rank 2");
  ASSERT_TRUE(a.waitFor([&] { return a.failed.size() == 1; })) << "the send to rank 2 never failed";
  EXPECT_EQ(a.failures[0].kind, LinkError::Kind::kAuthFailed) << a.failures[0].toString();
  EXPECT_NE(a.failures[0].message.find("not rank 2"), std::string::npos) << a.failures[0].message;
  std::this_thread::sleep_for(100ms);
  std::lock_guard lock(b.mutex);
  EXPECT_TRUE(b.received.empty()) << "rank 1 took a frame meant for rank 2";
}

class TamperedLink : public ::testing::TestWithParam<FabricSecurity> {};

INSTANTIATE_TEST_SUITE_P(Security, TamperedLink,
                         ::testing::Values(FabricSecurity::kIntegrity, FabricSecurity::kEncrypt),
                         [](const auto& info) { return std::string(securityName(info.param)); });

// A relay on the path between two ranks lets the handshake through and then
// edits a payload (under encrypt it cannot find one: it edits a byte of
// each frame instead). The receiver must refuse the frame and close only
// that link.
TEST_P(TamperedLink, AnEditedFrameIsNeverDelivered) {
  Secret secret = randomSecret();
  Node a(0, 2, secret, GetParam()), b(1, 2, secret, GetParam());
  std::size_t seen = 0;
  std::atomic<bool> edited{false};
  crown::testing::TcpRelay onPath(b.transport->address(), [&](std::string& chunk) {
    auto at = chunk.find(kMarker);
    if (at != std::string::npos) {
      chunk[at] ^= 0x20;
      edited = true;
    } else if (GetParam() == FabricSecurity::kEncrypt && seen + chunk.size() > kClientAuthBytes) {
      chunk.back() ^= 0x20;  // past the client's proof: a byte of a frame
      edited = true;
    }
    seen += chunk.size();
  });
  a.transport->start({a.transport->address(), onPath.address()}, a.callbacks());
  b.transport->start({a.transport->address(), b.transport->address()}, b.callbacks());
  a.send(1, std::string("transfer 100 to ") + kMarker);
  std::this_thread::sleep_for(300ms);  // an honest relay delivers in under 30 ms (below)
  EXPECT_TRUE(edited) << "the frame never crossed the relay";
  std::lock_guard lock(b.mutex);
  for (const auto& message : b.received) {
    ADD_FAILURE() << "delivered an edited frame: " << message.payload;
  }
  EXPECT_TRUE(b.lost.empty()) << "a bad frame is no lost peer";
}

// The same relay, editing nothing, is only a router: frames arrive intact.
TEST(RelayAttack, AnHonestRelayOnThePathDelivers) {
  Secret secret = randomSecret();
  Node a(0, 2, secret, FabricSecurity::kIntegrity), b(1, 2, secret, FabricSecurity::kIntegrity);
  crown::testing::TcpRelay onPath(b.transport->address());
  a.transport->start({a.transport->address(), onPath.address()}, a.callbacks());
  b.transport->start({a.transport->address(), b.transport->address()}, b.callbacks());
  a.send(1, "intact");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  EXPECT_EQ(b.received[0].payload, "intact");
}

}  // namespace
}  // namespace crown::transport
