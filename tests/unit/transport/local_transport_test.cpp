// The in-process transport that simulated procs use (SIM-1), beyond the
// conformance suite (conformance_test.cpp): a disconnection as both sides see it.
#include <gtest/gtest.h>

#include "crown/transport/local.h"
#include "support/transport_inbox.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

using Inbox = testing::TransportInbox;

OutMessage message(Rank to, std::string payload) {
  return testing::testMessage(to, std::move(payload));
}

class LocalTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_->start();
    for (Rank r = 0; r < 3; ++r) {
      transports_.push_back(makeLocalTransport(hub_, r));
      transports_.back()->start({}, inboxes_[r].callbacks());
    }
  }
  void TearDown() override {
    for (auto& transport : transports_) transport->stop(0ms);
    pool_->stop();
  }

  std::shared_ptr<IoPool> pool_ = std::make_shared<IoPool>();
  std::shared_ptr<LocalHub> hub_ = makeLocalHub(pool_, 3);
  std::vector<std::unique_ptr<Transport>> transports_;
  Inbox inboxes_[3];
};

TEST_F(LocalTransportTest, ADisconnectedRankIsLostEverywhere) {
  disconnect(*hub_, 1);
  ASSERT_TRUE(inboxes_[0].waitFor([&] { return inboxes_[0].lost == std::vector<Rank>{1}; }));
  ASSERT_TRUE(
      inboxes_[1].waitFor([&] { return inboxes_[1].lost.size() == 2; }));  // it lost everyone
  transports_[0]->send(1, message(1, "too late"));
  ASSERT_TRUE(inboxes_[0].waitFor([&] { return inboxes_[0].failed.size() == 1; }));
  EXPECT_EQ(inboxes_[0].failed[0], "too late");  // handed back
  std::lock_guard lock(inboxes_[1].mutex);
  EXPECT_TRUE(inboxes_[1].received.empty());
}

}  // namespace
}  // namespace crown::transport
