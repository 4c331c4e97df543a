// One conformance suite for every transport backend (tensorpipe's
// transport_test.h): a job of three ranks in this process, over TCP, over
// same-host Unix sockets, over the routing fabric of a real rank, and over
// the in-process hub of simulated procs. Each backend joins in one line
// (INSTANTIATE_TEST_SUITE_P at the end).
#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "crown/common/blocking.h"
#include "crown/transport/local.h"
#include "crown/transport/transport.h"
#include "support/transport_inbox.h"
#include "transport/shm/shm_backend.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;
using Inbox = crown::testing::TransportInbox;

struct JobOptions {
  Rank size = 3;
  wire::FrameLimits limits;
  bool ownSecrets = false;  ///< each rank a secret of its own (authenticated backends)
};

// A job of `size` ranks on one backend. Ranks in `absent` never start, and
// the others are given an address for them where nobody listens.
class Job {
 public:
  virtual ~Job() = default;
  virtual void start(const std::set<Rank>& absent) = 0;
  /// Rank r goes away, as its process would.
  virtual void lose(Rank r) = 0;
  virtual Transport& at(Rank r) = 0;
  Inbox& inbox(Rank r) { return inboxes_.at(r); }

 protected:
  explicit Job(Rank size) : inboxes_(size) {}
  std::vector<Inbox> inboxes_;
};

// Asio backends (or the routing fabric over them): the ranks listen on
// loopback; losing a rank stops its transport, which closes its sockets.
class AsioJob : public Job {
 public:
  using Make = std::function<std::unique_ptr<Transport>(const AsioOptions&)>;
  AsioJob(const JobOptions& job, Make make, std::string nowhere)
      : Job(job.size), nowhere_(nowhere) {
    Secret shared = randomSecret();
    for (Rank r = 0; r < job.size; ++r) {
      AsioOptions options;
      options.rank = r;
      options.size = job.size;
      options.bindAddress = "127.0.0.1";
      options.host = "conformance-host";
      options.secret = job.ownSecrets ? randomSecret() : shared;
      options.limits = job.limits;
      options.connectTimeout = 2s;
      options.authTimeout = 2s;
      transports_.push_back(make(options));
    }
  }
  void start(const std::set<Rank>& absent) override {
    std::vector<std::string> addresses;
    for (Rank r = 0; r < transports_.size(); ++r)
      addresses.push_back(absent.count(r) ? nowhere_ : transports_[r]->address());
    for (Rank r = 0; r < transports_.size(); ++r)
      if (!absent.count(r)) transports_[r]->start(addresses, inboxes_[r].callbacks());
  }
  void lose(Rank r) override { transports_.at(r)->stop(0ms); }
  Transport& at(Rank r) override { return *transports_.at(r); }

 private:
  std::string nowhere_;
  std::vector<std::unique_ptr<Transport>> transports_;
};

class LocalJob : public Job {
 public:
  explicit LocalJob(const JobOptions& job)
      : Job(job.size), hub_(makeLocalHub(pool_, job.size, job.limits)) {
    pool_->start();
    for (Rank r = 0; r < job.size; ++r) transports_.push_back(makeLocalTransport(hub_, r));
  }
  ~LocalJob() override {
    for (auto& transport : transports_) transport->stop(0ms);
    pool_->stop();
  }
  void start(const std::set<Rank>& absent) override {
    for (Rank r = 0; r < transports_.size(); ++r)
      if (!absent.count(r)) transports_[r]->start({}, inboxes_[r].callbacks());
  }
  void lose(Rank r) override { disconnect(*hub_, r); }
  Transport& at(Rank r) override { return *transports_.at(r); }

 private:
  std::shared_ptr<IoPool> pool_ = std::make_shared<IoPool>();
  std::shared_ptr<LocalHub> hub_;
  std::vector<std::unique_ptr<Transport>> transports_;
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<Job>(const JobOptions&)> make;
  // GoogleTest prints parameters; without this it dumps their bytes.
  friend void PrintTo(const Backend& backend, std::ostream* out) { *out << backend.name; }
};

Backend tcp() {
  return {"tcp", [](const JobOptions& job) {
            return std::make_unique<AsioJob>(job, makeTcpBackend,
                                             "127.0.0.1:1");  // nobody on port 1
          }};
}
Backend unixSockets() {
  return {"unix", [](const JobOptions& job) {
            return std::make_unique<AsioJob>(job, makeUnixBackend,
                                             "crown-nobody-listens-here\nconformance-host");
          }};
}
Backend fabric() {
  return {"fabric", [](const JobOptions& job) {
            Addresses nowhere{{"unix", "crown-nobody-listens-here\nconformance-host"},
                              {"tcp", "127.0.0.1:1"}};
            return std::make_unique<AsioJob>(job, makeAsioTransport, encodeAddresses(nowhere));
          }};
}
Backend sharedMemory() {
  return {"shm", [](const JobOptions& job) {
            return std::make_unique<AsioJob>(job, shm::makeShmBackend,
                                             "crown-nobody-listens-here\nconformance-host");
          }};
}
Backend inProcess() {
  return {"in_process", [](const JobOptions& job) { return std::make_unique<LocalJob>(job); }};
}

OutMessage message(Rank to, wire::Payload payload) {
  return testing::testMessage(to, std::move(payload));
}
OutMessage message(Rank to, const char* text) { return message(to, wire::Payload(text)); }

class TransportConformance : public ::testing::TestWithParam<Backend> {
 protected:
  std::unique_ptr<Job> job(JobOptions options = {}) { return GetParam().make(options); }
};

class AuthenticatedTransportConformance : public TransportConformance {};

TEST_P(TransportConformance, FramesFromEachSenderArriveInSendOrder) {
  auto j = job();
  j->start({});
  constexpr int kCount = 3000;
  for (int i = 0; i < kCount; ++i) {
    j->at(0).send(2, message(2, "a" + std::to_string(i)));
    j->at(1).send(2, message(2, "b" + std::to_string(i)));
  }
  Inbox& inbox = j->inbox(2);
  ASSERT_TRUE(inbox.waitFor([&] { return inbox.received.size() == 2 * kCount; }, 20s));
  int next[2] = {0, 0};
  for (const auto& received : inbox.received) {
    ASSERT_LT(received.from, 2u);
    EXPECT_EQ(received.payload,
              (received.from == 0 ? "a" : "b") + std::to_string(next[received.from]++));
  }
  EXPECT_EQ(next[0], kCount);
  EXPECT_EQ(next[1], kCount);
  EXPECT_TRUE(j->inbox(0).failed.empty());
}

// A delivery that waits (marked as blocking, as a raw agent's wait is, so a
// backend that runs handlers on its reader hands the reading on) is still
// a delivery of the link's: the peer's next frame waits for it to return.
TEST_P(TransportConformance, ADeliveryThatWaitsHoldsBackThePeersNextFrame) {
  auto j = job();
  Inbox& inbox = j->inbox(1);
  std::atomic<bool> firstReturned{false};
  std::atomic<bool> overtaken{false};
  inbox.onDeliver = [&](const wire::Bytes& payload) {
    if (payload == "first") {
      detail::BlockingScope waiting;
      std::this_thread::sleep_for(200ms);
      firstReturned = true;
    } else if (!firstReturned) {
      overtaken = true;
    }
  };
  j->start({});
  j->at(0).send(1, message(1, "first"));
  j->at(0).send(1, message(1, "second"));
  ASSERT_TRUE(inbox.waitFor([&] { return inbox.received.size() == 2; }, 10s));
  EXPECT_FALSE(overtaken) << "the second frame was delivered while the first's delivery waited";
  EXPECT_EQ(inbox.received[0].payload, "first");
  EXPECT_EQ(inbox.received[1].payload, "second");
}

TEST_P(TransportConformance, LargeAndSegmentedPayloadsArriveWhole) {
  auto j = job();
  j->start({});
  std::string big(8 << 20, 'z');
  big[12345] = 'q';
  j->at(0).send(1, message(1, big));
  // Segments owned elsewhere go out where they lie and arrive as one buffer.
  auto owned = std::make_shared<std::string>(3 << 20, 'm');
  wire::Payload segmented(std::string("head|"));
  segmented.append(owned, owned->data(), owned->size());
  segmented.append(owned, owned->data(), 4);
  j->at(0).send(1, message(1, std::move(segmented)));
  j->at(0).send(1, message(1, "after"));
  Inbox& inbox = j->inbox(1);
  ASSERT_TRUE(inbox.waitFor([&] { return inbox.received.size() == 3; }, 20s));
  EXPECT_TRUE(inbox.received[0].payload == big);
  EXPECT_TRUE(inbox.received[1].payload == "head|" + *owned + owned->substr(0, 4));
  EXPECT_EQ(inbox.received[2].payload, "after");
}

TEST_P(TransportConformance, AFrameOverTheLimitIsNeverDeliveredAndNobodyIsLost) {
  JobOptions options;
  options.limits.maxPayloadBytes = 1024;
  auto j = job(options);
  j->start({});
  j->at(0).send(1, message(1, "fits"));
  j->at(0).send(1, message(1, std::string(4096, 'x')));
  Inbox& receiver = j->inbox(1);
  ASSERT_TRUE(receiver.waitFor([&] { return !receiver.received.empty(); }));
  std::this_thread::sleep_for(200ms);
  std::lock_guard lock(receiver.mutex);
  ASSERT_EQ(receiver.received.size(), 1u);
  EXPECT_EQ(receiver.received[0].payload, "fits");
  EXPECT_TRUE(receiver.lost.empty());  // a protocol error is not a lost process
}

TEST_P(TransportConformance, ALostPeerIsReportedOnceAndLaterFramesAreHandedBack) {
  auto j = job();
  j->start({});
  j->at(0).send(1, message(1, "hello"));
  ASSERT_TRUE(j->inbox(1).waitFor([&] { return j->inbox(1).received.size() == 1; }));
  j->lose(1);
  Inbox& sender = j->inbox(0);
  ASSERT_TRUE(sender.waitFor([&] { return sender.lost.size() == 1; }));
  EXPECT_EQ(sender.lost[0], 1u);
  EXPECT_TRUE(sender.lostWhy[0].peerLost());
  j->at(0).send(1, message(1, "too late"));
  ASSERT_TRUE(sender.waitFor([&] { return sender.failed.size() == 1; }));
  EXPECT_EQ(sender.failed[0], "too late");
  EXPECT_TRUE(sender.failures[0].peerLost()) << sender.failures[0].toString();
  j->at(0).send(2, message(2, "the rest serve on"));
  ASSERT_TRUE(j->inbox(2).waitFor([&] { return j->inbox(2).received.size() == 1; }));
  std::this_thread::sleep_for(50ms);
  std::lock_guard lock(sender.mutex);
  EXPECT_EQ(sender.lost.size(), 1u);
}

TEST_P(TransportConformance, AnUnreachablePeerFailsTheSendAsRefused) {
  auto j = job();
  j->start({1});
  j->at(0).send(1, message(1, "nobody"));
  Inbox& sender = j->inbox(0);
  ASSERT_TRUE(sender.waitFor([&] { return sender.failed.size() == 1 && sender.lost.size() == 1; }));
  EXPECT_EQ(sender.failed[0], "nobody");
  EXPECT_EQ(sender.failures[0].kind, LinkError::Kind::kRefused) << sender.failures[0].toString();
  EXPECT_EQ(sender.lost[0], 1u);
}

TEST_P(TransportConformance, ARankOutsideTheJobIsAnError) {
  auto j = job();
  j->start({});
  EXPECT_THROW(j->at(0).send(7, message(7, "nowhere")), ConfigError);
}

TEST_P(AuthenticatedTransportConformance, AWrongSecretNeverDelivers) {
  JobOptions options;
  options.ownSecrets = true;
  auto j = job(options);
  j->start({});
  j->at(0).send(1, message(1, "intruder"));
  Inbox& sender = j->inbox(0);
  ASSERT_TRUE(sender.waitFor([&] { return sender.failed.size() == 1 && sender.lost.size() == 1; }));
  EXPECT_EQ(sender.failed[0], "intruder");  // handed back
  EXPECT_EQ(sender.failures[0].kind, LinkError::Kind::kAuthFailed) << sender.failures[0].toString();
  std::this_thread::sleep_for(100ms);
  std::lock_guard lock(j->inbox(1).mutex);
  EXPECT_TRUE(j->inbox(1).received.empty());
}

std::string nameOf(const ::testing::TestParamInfo<Backend>& info) { return info.param.name; }

// One line per backend.
INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformance, ::testing::Values(tcp()), nameOf);
INSTANTIATE_TEST_SUITE_P(Unix, TransportConformance, ::testing::Values(unixSockets()), nameOf);
INSTANTIATE_TEST_SUITE_P(Fabric, TransportConformance, ::testing::Values(fabric()), nameOf);
INSTANTIATE_TEST_SUITE_P(InProcess, TransportConformance, ::testing::Values(inProcess()), nameOf);
INSTANTIATE_TEST_SUITE_P(Shm, TransportConformance, ::testing::Values(sharedMemory()), nameOf);
// The in-process hub has no secret to get wrong.
INSTANTIATE_TEST_SUITE_P(Tcp, AuthenticatedTransportConformance, ::testing::Values(tcp()), nameOf);
INSTANTIATE_TEST_SUITE_P(Unix, AuthenticatedTransportConformance, ::testing::Values(unixSockets()),
                         nameOf);
INSTANTIATE_TEST_SUITE_P(Fabric, AuthenticatedTransportConformance, ::testing::Values(fabric()),
                         nameOf);
INSTANTIATE_TEST_SUITE_P(Shm, AuthenticatedTransportConformance, ::testing::Values(sharedMemory()),
                         nameOf);

}  // namespace
}  // namespace crown::transport
