// What only the socket backends (Asio's and the shared-memory one) do, beyond the conformance suite
// (conformance_test.cpp): heartbeats on quiet links, silent peers, when a
// peer was last heard, the listen address, and the routing fabric's choice
// of backend per peer.
#include <gtest/gtest.h>

#include "crown/transport/transport.h"
#include "support/transport_inbox.h"
#include "transport/shm/shm_backend.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

AsioOptions optionsFor(Rank rank, const Secret& secret, std::chrono::milliseconds heartbeat,
                       std::shared_ptr<IoPool> pool = nullptr, std::string host = "this-host") {
  AsioOptions options;
  options.heartbeatInterval = heartbeat;
  options.heartbeatMisses = 6;  // 120 ms of silence: a loaded 2-core CI machine stalls for 60
  options.pool = std::move(pool);
  options.rank = rank;
  options.size = 2;
  options.bindAddress = "127.0.0.1";
  options.host = std::move(host);
  options.secret = secret;
  options.connectTimeout = 2s;
  options.authTimeout = 2s;
  return options;
}

struct Node : crown::testing::TransportInbox {
  explicit Node(std::unique_ptr<Transport> t) : transport(std::move(t)) {}
  void send(Rank to, std::string payload) {
    transport->send(to, crown::testing::testMessage(to, std::move(payload)));
  }
  std::unique_ptr<Transport> transport;
};

void startPair(Node& a, Node& b) {
  std::vector<std::string> peers{a.transport->address(), b.transport->address()};
  a.transport->start(peers, a.callbacks());
  b.transport->start(peers, b.callbacks());
}

class AsioBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Transport> make(const AsioOptions& options) {
    if (GetParam() == "tcp") return makeTcpBackend(options);
    if (GetParam() == "unix") return makeUnixBackend(options);
    return shm::makeShmBackend(options);
  }
};

// The shared-memory backend keeps the same heartbeat contract (over its
// links' sockets), so it runs these too.
INSTANTIATE_TEST_SUITE_P(Links, AsioBackendTest, ::testing::Values("tcp", "unix", "shm"));

TEST_P(AsioBackendTest, HeartbeatsKeepAQuietLinkAlive) {
  Secret secret = randomSecret();
  Node a(make(optionsFor(0, secret, 20ms))), b(make(optionsFor(1, secret, 20ms)));
  startPair(a, b);
  a.send(1, "before");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  std::this_thread::sleep_for(600ms);  // 30 intervals, 5 times the allowed silence
  a.send(1, "after");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 2; }));
  std::lock_guard lock(a.mutex);
  EXPECT_TRUE(a.lost.empty());
  EXPECT_TRUE(b.lost.empty());  // heartbeats are consumed, never delivered
}

TEST_P(AsioBackendTest, ASilentPeerIsLostAfterTheMissedHeartbeats) {
  Secret secret = randomSecret();
  auto frozenPool = std::make_shared<IoPool>();
  frozenPool->start();
  Node a(make(optionsFor(0, secret, 20ms))), b(make(optionsFor(1, secret, 20ms, frozenPool)));
  startPair(a, b);
  a.send(1, "hello");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  // b's threads stop but its sockets stay open: like a hung process or a
  // cut cable, nothing tells a that b is gone but the silence.
  frozenPool->stop();
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(a.waitFor([&] { return a.lost.size() == 1; }, 5s));
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 100ms);  // not before the misses are up
  EXPECT_LT(elapsed, 2s);
  EXPECT_EQ(a.lost[0], 1u);
  EXPECT_EQ(a.lostWhy[0].kind, LinkError::Kind::kTimeout) << a.lostWhy[0].toString();
}

// How fresh a peer's sign of life is (crown status's "heard"): unknown
// before there is a link to it, the time of the last bytes read once a
// frame arrives, and kept fresh by heartbeats while the link is quiet.
// Heartbeats every 20 ms (optionsFor).
void expectLastHeardFollowsTheLink(Node& a, Node& b) {
  EXPECT_FALSE(b.transport->lastHeard(0));  // no link yet
  auto sent = std::chrono::steady_clock::now();
  a.send(1, "hello");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  auto first = b.transport->lastHeard(0);
  ASSERT_TRUE(first);
  EXPECT_GE(*first, sent);
  EXPECT_LT(std::chrono::steady_clock::now() - *first, 1s);
  EXPECT_FALSE(b.transport->lastHeard(1));  // itself
  std::this_thread::sleep_for(200ms);  // quiet: only heartbeats
  auto later = b.transport->lastHeard(0);
  ASSERT_TRUE(later);
  EXPECT_GT(*later, *first);
}

TEST_P(AsioBackendTest, LastHeardIsWhenThePeersLastBytesArrived) {
  Secret secret = randomSecret();
  Node a(make(optionsFor(0, secret, 20ms))), b(make(optionsFor(1, secret, 20ms)));
  startPair(a, b);
  expectLastHeardFollowsTheLink(a, b);
}

TEST(AsioFabric, LastHeardComesFromTheBackendThatCarriesThePeer) {
  Secret secret = randomSecret();
  Node a(makeAsioTransport(optionsFor(0, secret, 20ms)));
  Node b(makeAsioTransport(optionsFor(1, secret, 20ms)));
  startPair(a, b);
  expectLastHeardFollowsTheLink(a, b);
}

TEST(AsioBackend, UnusableAddressIsABootstrapError) {
  AsioOptions options;
  options.bindAddress = "203.0.113.77";  // TEST-NET-3: never a local address
  try {
    makeTcpBackend(options);
    FAIL() << "listening on a foreign address succeeded";
  } catch (const BootstrapError& e) {
    EXPECT_NE(std::string(e.what()).find("203.0.113.77"), std::string::npos) << e.what();
  }
}

// The fabric routes a peer on the same host over its Unix socket, and one
// on another host over TCP (its Unix address does not reach this host).
TEST(AsioFabric, PicksUnixOnTheSameHostAndTcpAcrossHosts) {
  Secret secret = randomSecret();
  for (std::string host : {"this-host", "other-host"}) {
    auto a = makeAsioTransport(optionsFor(0, secret, 1000ms));
    auto b = makeAsioTransport(optionsFor(1, secret, 1000ms, nullptr, host));
    Addresses offered = decodeAddresses(b->address());
    ASSERT_EQ(offered.size(), 2u);
    EXPECT_EQ(offered[0].first, "unix");
    EXPECT_EQ(offered[1].first, "tcp");
    // Break the route not taken: only the chosen backend can deliver.
    Addresses only = host == "this-host" ? Addresses{offered[0], {"tcp", "127.0.0.1:1"}}
                                         : Addresses{{"unix", offered[0].second}, offered[1]};
    Node na(std::move(a)), nb(std::move(b));
    std::vector<std::string> peers{na.transport->address(), encodeAddresses(only)};
    na.transport->start(peers, na.callbacks());
    nb.transport->start({na.transport->address(), nb.transport->address()}, nb.callbacks());
    na.send(1, "over " + host);
    ASSERT_TRUE(nb.waitFor([&] { return nb.received.size() == 1; })) << host;
    EXPECT_EQ(nb.received[0].payload, "over " + host);
  }
}

// A replacement for a lost rank joins under a spare slot: frames to the slot
// are refused (and nobody is lost) until the rank is admitted, then reach
// it; it reaches the others, who accept it, admitted or not.
TEST(AsioFabric, ARankThatJoinsLaterIsReachedOnceAdmitted) {
  Secret secret = randomSecret();
  auto withSlots = [&](Rank rank) {
    AsioOptions options = optionsFor(rank, secret, 1000ms);
    options.size = 3;
    return options;
  };
  Node a(makeAsioTransport(withSlots(0))), b(makeAsioTransport(withSlots(1)));
  std::vector<std::string> launched{a.transport->address(), b.transport->address(), ""};
  a.transport->start(launched, a.callbacks());
  b.transport->start(launched, b.callbacks());
  a.send(2, "too early");
  ASSERT_TRUE(a.waitFor([&] { return a.failed.size() == 1; }));
  EXPECT_EQ(a.failures[0].kind, LinkError::Kind::kRefused);

  Node c(makeAsioTransport(withSlots(2)));
  std::vector<std::string> all{a.transport->address(), b.transport->address(),
                               c.transport->address()};
  c.transport->start(all, c.callbacks());
  a.transport->admit(2, c.transport->address());
  a.send(2, "welcome");
  ASSERT_TRUE(c.waitFor([&] { return c.received.size() == 1; }));
  EXPECT_EQ(c.received[0].payload, "welcome");
  c.send(1, "hello from the new rank");  // b has not admitted it: it still accepts it
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  EXPECT_EQ(b.received[0].from, 2u);
  EXPECT_TRUE(a.lost.empty());

  EXPECT_THROW(a.transport->admit(0, c.transport->address()), ConfigError);  // itself
  EXPECT_THROW(a.transport->admit(3, c.transport->address()), ConfigError);  // no such slot
  EXPECT_THROW(a.transport->admit(2, encodeAddresses({{"smoke", "signal"}})), ConfigError);
}

TEST(AsioFabric, AGarbledAddressIsAProtocolError) {
  EXPECT_THROW(decodeAddresses("\x05"), ProtocolError);
  EXPECT_THROW(decodeAddresses(encodeAddresses({{"tcp", "1.2.3.4:5"}}) + "x"), ProtocolError);
  Addresses round{{"unix", std::string("name\nhost")}, {"tcp", "10.0.0.1:4242"}};
  EXPECT_EQ(decodeAddresses(encodeAddresses(round)), round);
}

}  // namespace
}  // namespace crown::transport
