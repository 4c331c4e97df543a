// Two Asio transports in one process, as ranks 0 and 1 of a job of 2: one
// conformance suite, run over TCP and over same-host Unix sockets.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "crown/transport/transport.h"
#include "support/transport_inbox.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

class Node : public testing::TransportInbox {
 public:
  Node(Rank rank, const Secret& secret, wire::FrameLimits limits = {},
       std::chrono::milliseconds heartbeat = 1000ms, std::shared_ptr<IoPool> pool = nullptr) {
    AsioOptions options;
    options.heartbeatInterval = heartbeat;
    options.heartbeatMisses = 3;
    options.pool = pool;
    if (pool) pool->start();
    options.rank = rank;
    options.size = 2;
    options.bindAddress = "127.0.0.1";
    options.secret = secret;
    options.limits = limits;
    options.connectTimeout = 2s;
    options.authTimeout = 2s;
    transport = makeAsioTransport(options);
  }

  void start(std::vector<Endpoint> peers) { transport->start(std::move(peers), callbacks()); }

  void send(Rank to, std::string payload) {
    transport->send(to,
                    {{wire::MessageKind::kOneWay, {0, 0}, {to, 2}, 0, "test"}, std::move(payload)});
  }

  std::unique_ptr<Transport> transport;
};

class AsioTransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  bool overTcp() const { return GetParam() == "tcp"; }

  Endpoint reachable(const Node& node) const {
    Endpoint endpoint = node.transport->localEndpoint();
    if (overTcp()) endpoint.local.clear();
    return endpoint;
  }

  void startPair(Node& a, Node& b) {
    std::vector<Endpoint> peers{reachable(a), reachable(b)};
    ASSERT_NE(peers[1].local.empty(), !overTcp());
    a.start(peers);
    b.start(peers);
  }
};

INSTANTIATE_TEST_SUITE_P(Links, AsioTransportTest, ::testing::Values("tcp", "unix"));

TEST_P(AsioTransportTest, DeliversInSendOrder) {
  Secret secret = randomSecret();
  Node a(0, secret), b(1, secret);
  startPair(a, b);
  constexpr int kCount = 5000;
  for (int i = 0; i < kCount; ++i) a.send(1, std::to_string(i));
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == kCount; }));
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(b.received[i].payload, std::to_string(i));
    EXPECT_EQ(b.received[i].from, 0u);
  }
  EXPECT_TRUE(a.failed.empty());
}

TEST_P(AsioTransportTest, LargeFramesArriveWhole) {
  Secret secret = randomSecret();
  Node a(0, secret), b(1, secret);
  startPair(a, b);
  std::string big(8 << 20, 'z');
  big[12345] = 'q';
  a.send(1, big);
  a.send(1, "after");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 2; }, 20s));
  EXPECT_EQ(b.received[0].payload, big);
  EXPECT_EQ(b.received[1].payload, "after");
}

TEST_P(AsioTransportTest, AWrongSecretNeverDelivers) {
  Node a(0, randomSecret()), b(1, randomSecret());
  startPair(a, b);
  a.send(1, "intruder");
  ASSERT_TRUE(a.waitFor([&] { return a.failed.size() == 1 && a.lost.size() == 1; }));
  EXPECT_EQ(a.failed[0], "intruder");  // handed back
  EXPECT_EQ(a.lost[0], 1u);
  std::this_thread::sleep_for(100ms);
  std::lock_guard lock(b.mutex);
  EXPECT_TRUE(b.received.empty());
}

TEST_P(AsioTransportTest, AFrameOverTheLimitClosesThatLinkOnly) {
  Secret secret = randomSecret();
  wire::FrameLimits small;
  small.maxPayloadBytes = 1024;
  Node a(0, secret), b(1, secret, small);
  startPair(a, b);
  a.send(1, "fits");
  a.send(1, std::string(4096, 'x'));
  a.send(1, "after the bad frame");
  ASSERT_TRUE(a.waitFor([&] { return a.lost.size() == 1; }));
  std::lock_guard lock(b.mutex);
  ASSERT_EQ(b.received.size(), 1u);
  EXPECT_EQ(b.received[0].payload, "fits");
  EXPECT_TRUE(b.lost.empty());  // a protocol error is not a lost process
}

TEST_P(AsioTransportTest, APeerThatStopsIsReportedLost) {
  Secret secret = randomSecret();
  Node a(0, secret), b(1, secret);
  startPair(a, b);
  a.send(1, "hello");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  b.transport->stop(0ms);
  ASSERT_TRUE(a.waitFor([&] { return a.lost.size() == 1; }));
  EXPECT_EQ(a.lost[0], 1u);
  a.send(1, "too late");
  ASSERT_TRUE(a.waitFor([&] { return a.failed.size() == 1; }));
  EXPECT_EQ(a.failed[0], "too late");
}

TEST_P(AsioTransportTest, HeartbeatsKeepAQuietLinkAlive) {
  Secret secret = randomSecret();
  Node a(0, secret, {}, 20ms), b(1, secret, {}, 20ms);
  startPair(a, b);
  a.send(1, "before");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  std::this_thread::sleep_for(300ms);  // 15 intervals, 5 times the allowed silence
  a.send(1, "after");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 2; }));
  std::lock_guard lock(a.mutex);
  EXPECT_TRUE(a.lost.empty());
  EXPECT_TRUE(b.lost.empty());  // heartbeats are consumed, never delivered
}

TEST_P(AsioTransportTest, ASilentPeerIsLostAfterTheMissedHeartbeats) {
  Secret secret = randomSecret();
  auto frozenPool = std::make_shared<IoPool>();
  Node a(0, secret, {}, 20ms), b(1, secret, {}, 20ms, frozenPool);
  startPair(a, b);
  a.send(1, "hello");
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  // b's threads stop but its sockets stay open: like a hung process or a
  // cut cable, nothing tells a that b is gone but the silence.
  frozenPool->stop();
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(a.waitFor([&] { return a.lost.size() == 1; }, 5s));
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 40ms);  // not before the misses are up
  EXPECT_LT(elapsed, 2s);
  EXPECT_EQ(a.lost[0], 1u);
}

TEST_P(AsioTransportTest, UnreachablePeerFailsTheSend) {
  Secret secret = randomSecret();
  Node a(0, secret);
  Endpoint nobody{"127.0.0.1", 1, overTcp() ? "" : "crown-nobody-listens-here"};  // nor on port 1
  a.start({reachable(a), nobody});
  a.send(1, "nobody");
  ASSERT_TRUE(a.waitFor([&] { return a.failed.size() == 1 && a.lost.size() == 1; }));
}

TEST(AsioTransport, UnusableAddressIsABootstrapError) {
  AsioOptions options;
  options.bindAddress = "203.0.113.77";  // TEST-NET-3: never a local address
  try {
    makeAsioTransport(options);
    FAIL() << "listening on a foreign address succeeded";
  } catch (const BootstrapError& e) {
    EXPECT_NE(std::string(e.what()).find("203.0.113.77"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crown::transport
