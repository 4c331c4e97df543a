// Issue 10: a peer that dies says how first (Transport::depart, sent by
// bootstrap/departure.h from its exit hook and fatal-signal handlers), and
// the survivor names those words when it reports the peer lost; a peer that
// dies without a word is said to have left none.
#include <gtest/gtest.h>

#include "crown/transport/transport.h"
#include "support/transport_inbox.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

struct Node : crown::testing::TransportInbox {
  Node(Rank rank, const Secret& secret)
      : transport(makeTcpBackend(crown::testing::loopbackOptions(rank, 2, secret))) {}
  std::unique_ptr<Backend> transport;
};

// Rank 0 talks to rank 1, then (maybe) departs with `words` and goes; what
// rank 1 says of the loss.
std::string lossAfter(const char* words) {
  Secret secret = randomSecret();
  auto a = std::make_unique<Node>(0, secret);
  Node b(1, secret);
  std::vector<std::string> peers{a->transport->address(), b.transport->address()};
  a->transport->start(peers, a->callbacks());
  b.transport->start(peers, b.callbacks());
  a->transport->send(1, crown::testing::testMessage(1, std::string("hello")));
  EXPECT_TRUE(b.waitFor([&] { return b.received.size() == 1; }));
  if (words) a->transport->depart(words, 1s);
  a.reset();  // its links close, as when the process ends
  EXPECT_TRUE(b.waitFor([&] { return b.lost.size() == 1; })) << "rank 0 was never reported lost";
  std::lock_guard lock(b.mutex);
  return b.lostWhy.empty() ? "" : b.lostWhy[0].message;
}

TEST(LastWords, APeerThatDepartsIsReportedLostWithThem) {
  std::string loss = lossAfter("killed by SIGSEGV (Segmentation fault)");
  EXPECT_NE(loss.find("its last words: killed by SIGSEGV (Segmentation fault)"), std::string::npos)
      << loss;
}

TEST(LastWords, APeerThatGoesWithoutAWordLeftNone) {
  std::string loss = lossAfter(nullptr);
  EXPECT_NE(loss.find("it left no last words"), std::string::npos) << loss;
}

}  // namespace
}  // namespace crown::transport
