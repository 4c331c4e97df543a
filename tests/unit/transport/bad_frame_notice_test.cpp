// Issue 10: a link closed for a protocol error is not a lost process. The
// side that refuses a frame tells the other why before it closes, so the
// other fails only the requests in flight on that link, naming the error,
// and takes nobody for lost; the next send opens a new link. Before the
// notice the sender saw the connection close and reported its peer lost.
#include <gtest/gtest.h>

#include "crown/transport/transport.h"
#include "support/tcp_relay.h"
#include "support/transport_inbox.h"
#include "transport/shm/shm_backend.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;
constexpr const char* kMarker = "BREAK-THIS-FRAME";

struct Node : crown::testing::TransportInbox {
  Node(Rank rank, const Secret& secret) {
    AsioOptions options = crown::testing::loopbackOptions(rank, 2, secret);
    options.security = FabricSecurity::kAuth;  // no tags: the relay's edit breaks framing instead
    transport = makeTcpBackend(options);
  }
  std::unique_ptr<Backend> transport;
};

OutMessage request(std::uint64_t id, std::string payload) {
  return {{wire::MessageKind::kRequest, {0, 0}, {1, 2}, id, "test"}, std::move(payload)};
}

TEST(BadFrameNotice, TheSenderFailsOnlyItsRequestsOnThatLinkAndLosesNobody) {
  Secret secret = randomSecret();
  Node a(0, secret), b(1, secret);
  // On the path from rank 0 to rank 1, the frame that carries the marker
  // loses its magic: rank 1 refuses it as a bad frame.
  crown::testing::TcpRelay onPath(b.transport->address(), [](std::string& chunk) {
    if (chunk.find(kMarker) == std::string::npos) return;
    if (auto magic = chunk.rfind("CRWN"); magic != std::string::npos) chunk[magic] = 'X';
  });
  a.transport->start({a.transport->address(), onPath.address()}, a.callbacks());
  b.transport->start({a.transport->address(), b.transport->address()}, b.callbacks());
  a.transport->send(1, request(7, "first"));
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }))
      << "the link never carried a frame";
  a.transport->send(1, request(8, kMarker));
  ASSERT_TRUE(a.waitFor([&] { return a.failures.size() >= 1; }))
      << "the requests in flight on the closed link never failed";
  std::this_thread::sleep_for(200ms);  // a loss would be reported by now
  {
    std::lock_guard lock(a.mutex);
    EXPECT_TRUE(a.lost.empty()) << "rank 0 took rank 1 for lost: " << a.lostWhy[0].toString();
    for (const auto& failure : a.failures) {
      EXPECT_EQ(failure.kind, LinkError::Kind::kBadFrame) << failure.toString();
      EXPECT_NE(failure.message.find("rank 1 refused a frame from this rank"), std::string::npos)
          << failure.message;
      EXPECT_NE(failure.message.find("bad frame magic"), std::string::npos) << failure.message;
    }
  }
  {
    std::lock_guard lock(b.mutex);
    EXPECT_TRUE(b.lost.empty()) << "rank 1 took rank 0 for lost: " << b.lostWhy[0].toString();
    EXPECT_EQ(b.received.size(), 1u) << "the broken frame was delivered";
  }
  a.transport->send(1, request(9, "after"));  // a new link
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 2; }));
  EXPECT_EQ(b.received[1].payload, "after");
}

// The shared-memory backend keeps the contract: rank 1, with a smaller frame
// limit, refuses rank 0's large frame and says so over the link's socket.
TEST(BadFrameNotice, OverSharedMemoryTheSenderFailsOnlyItsRequestsAndLosesNobody) {
  Secret secret = randomSecret();
  AsioOptions optionsA = crown::testing::loopbackOptions(0, 2, secret);
  AsioOptions optionsB = crown::testing::loopbackOptions(1, 2, secret);
  optionsB.limits.maxPayloadBytes = 1024;
  crown::testing::TransportInbox a, b;
  auto linkA = shm::makeShmBackend(optionsA), linkB = shm::makeShmBackend(optionsB);
  std::vector<std::string> peers{linkA->address(), linkB->address()};
  linkA->start(peers, a.callbacks());
  linkB->start(peers, b.callbacks());
  linkA->send(1, request(7, "first"));
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  linkA->send(1, request(8, std::string(4096, 'x')));
  ASSERT_TRUE(a.waitFor([&] { return a.failures.size() >= 1; }))
      << "the requests in flight on the closed link never failed";
  std::this_thread::sleep_for(200ms);  // a loss would be reported by now
  {
    std::lock_guard lock(a.mutex);
    EXPECT_TRUE(a.lost.empty()) << "rank 0 took rank 1 for lost: " << a.lostWhy[0].toString();
    EXPECT_EQ(a.failures.size(), 2u);  // 7 (never answered) and 8
    for (const auto& failure : a.failures) {
      EXPECT_EQ(failure.kind, LinkError::Kind::kBadFrame) << failure.toString();
      EXPECT_NE(failure.message.find("rank 1 refused a frame from this rank"), std::string::npos)
          << failure.message;
      EXPECT_NE(failure.message.find("exceeds the frame limit of 1024"), std::string::npos)
          << failure.message;
    }
  }
  {
    std::lock_guard lock(b.mutex);
    EXPECT_TRUE(b.lost.empty()) << "rank 1 took rank 0 for lost: " << b.lostWhy[0].toString();
    EXPECT_EQ(b.received.size(), 1u) << "the refused frame was delivered";
  }
  linkA->send(1, request(9, "after"));  // a new link
  ASSERT_TRUE(b.waitFor([&] { return b.received.size() == 2; }));
  EXPECT_EQ(b.received[1].payload, "after");
}

}  // namespace
}  // namespace crown::transport
