// Issue 10: a peer that dies says how first (Transport::depart, sent by
// bootstrap/departure.h from its exit hook and fatal-signal handlers), and
// the survivor names those words when it reports the peer lost; a peer that
// dies without a word is said to have left none.
#include <gtest/gtest.h>

#include "crown/transport/transport.h"
#include "support/transport_inbox.h"
#include "transport/shm/shm_backend.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

struct Node : crown::testing::TransportInbox {
  Node(const std::string& kind, Rank rank, const Secret& secret) {
    auto options = crown::testing::loopbackOptions(rank, 2, secret);
    transport = kind == "shm" ? shm::makeShmBackend(options) : makeTcpBackend(options);
  }
  std::unique_ptr<Backend> transport;
};

// The shared-memory backend carries the words in its ring: same contract.
class LastWords : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Links, LastWords, ::testing::Values("tcp", "shm"));

// Rank 0 talks to rank 1, then (maybe) departs with `words` and goes; what
// rank 1 says of the loss.
std::string lossAfter(const std::string& kind, const char* words) {
  Secret secret = randomSecret();
  auto a = std::make_unique<Node>(kind, 0, secret);
  Node b(kind, 1, secret);
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

TEST_P(LastWords, APeerThatDepartsIsReportedLostWithThem) {
  std::string loss = lossAfter(GetParam(), "killed by SIGSEGV (Segmentation fault)");
  EXPECT_NE(loss.find("its last words: killed by SIGSEGV (Segmentation fault)"), std::string::npos)
      << loss;
}

TEST_P(LastWords, APeerThatGoesWithoutAWordLeftNone) {
  std::string loss = lossAfter(GetParam(), nullptr);
  EXPECT_NE(loss.find("it left no last words"), std::string::npos) << loss;
}

}  // namespace
}  // namespace crown::transport
