// The shared-memory ring (issue 14): records of every size arrive whole and
// in order, across the wrap and larger than the ring; a segment passes to
// another process over a Unix socket and carries a ping-pong there; close
// wakes a waiting reader; a wait that times out says so; a reader that
// waits sleeps rather than spins; a segment that is not a sealed ring is
// refused. A frame's record (record.h) is read in pieces, its payload into a
// buffer of its own; one past the limits is refused before its payload is
// read.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <numeric>
#include <thread>

#include "crown/common/error.h"
#include "transport/shm/record.h"
#include "transport/shm/ring.h"

namespace crown::transport::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::byte> pattern(std::size_t size, unsigned seed) {
  std::vector<std::byte> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return out;
}

TEST(ShmRing, RecordsOfEverySizeArriveWholeAndInOrderAcrossTheWrap) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  const std::vector<std::size_t> sizes = {0, 1, 7, 100, 4000, 4088, 4096, 10000, 65536, 3};
  std::thread producer([&] {
    for (unsigned round = 0; round < 20; ++round) {
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        auto record = pattern(sizes[i], round * 16 + static_cast<unsigned>(i));
        ASSERT_EQ(writer.write(record, Clock::now() + 10s), Ring::Result::kDone);
      }
    }
  });
  std::vector<std::byte> got;
  for (unsigned round = 0; round < 20; ++round) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_EQ(reader.read(got, Clock::now() + 10s), Ring::Result::kDone);
      ASSERT_EQ(got, pattern(sizes[i], round * 16 + static_cast<unsigned>(i)))
          << "record " << i << " of round " << round;
    }
  }
  producer.join();
}

TEST(ShmRing, ARecordOfSeveralPartsIsOneRecord) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  auto a = pattern(10, 1), b = pattern(5000, 2);
  std::span<const std::byte> parts[] = {a, b};
  std::thread producer(
      [&] { EXPECT_EQ(writer.write(parts, Clock::now() + 10s), Ring::Result::kDone); });
  std::vector<std::byte> got;
  ASSERT_EQ(reader.read(got, Clock::now() + 10s), Ring::Result::kDone);
  producer.join();
  std::vector<std::byte> both = a;
  both.insert(both.end(), b.begin(), b.end());
  EXPECT_EQ(got, both);
}

OutMessage frameMessage(std::string payload) {
  return {{wire::MessageKind::kRequest, {0, 3}, {1, 4}, 77, "crown::Test"}, std::move(payload)};
}

TEST(ShmRecord, AFrameLargerThanTheRingIsReadInPiecesIntoItsOwnBuffer) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  auto bytes = pattern(50000, 9);
  OutMessage message =
      frameMessage(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  std::thread producer([&] {
    std::string head;
    EXPECT_EQ(writer.write(recordParts(message, head), Clock::now() + 10s), Ring::Result::kDone);
  });
  std::uint64_t length = 0;
  ASSERT_EQ(reader.begin(length, Clock::now() + 10s), Ring::Result::kDone);
  Frame frame;
  Taken taken = readFrame(reader, length, wire::FrameLimits{}, 0, frame);
  producer.join();
  ASSERT_EQ(taken, Taken::kFrame);
  EXPECT_EQ(frame.envelope.type, "crown::Test");
  EXPECT_EQ(frame.envelope.requestId, 77u);
  ASSERT_EQ(frame.payload.size(), bytes.size());
  EXPECT_EQ(0, std::memcmp(frame.payload.data(), bytes.data(), bytes.size()));
}

// Refused, a small record (taken whole) and a large one (refused once its
// header is read, before any buffer is made for its payload).
TEST(ShmRecord, APayloadPastTheLimitIsRefused) {
  for (std::size_t size : {3000, 200000}) {
    Ring writer = Ring::create(4096);
    Ring reader = Ring::attach(::dup(writer.fd()));
    OutMessage message = frameMessage(std::string(size, 'x'));
    std::thread producer([&] {
      std::string head;
      EXPECT_EQ(writer.write(recordParts(message, head), Clock::now() + 10s), Ring::Result::kDone);
    });
    wire::FrameLimits limits;
    limits.maxPayloadBytes = 1000;
    std::uint64_t length = 0;
    ASSERT_EQ(reader.begin(length, Clock::now() + 10s), Ring::Result::kDone);
    bool refused = false;
    try {
      Frame frame;
      readFrame(reader, length, limits, 0, frame);
    } catch (const ProtocolError& e) {
      refused = true;
      EXPECT_NE(std::string(e.what()).find(std::to_string(size)), std::string::npos) << e.what();
    }
    EXPECT_TRUE(refused) << "a payload of " << size << " bytes passed a limit of 1000";
    if (refused && size > 64 * 1024) {
      // The large one was refused from its header: the rest is still unread.
      std::vector<std::byte> rest(length - 4);
      EXPECT_TRUE(reader.take(rest));
      EXPECT_EQ(std::vector<std::byte>(rest.end() - static_cast<std::ptrdiff_t>(size), rest.end()),
                std::vector<std::byte>(size, std::byte{'x'}));
    }
    producer.join();
  }
}

TEST(ShmRecord, ARingClosedMidFrameGivesNoFrame) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  OutMessage message = frameMessage(std::string(100000, 'y'));
  std::thread producer([&] {
    std::string head;
    // The ring fills and nobody reads on: the write times out and closes it.
    EXPECT_EQ(writer.write(recordParts(message, head), Clock::now() + 200ms),
              Ring::Result::kTimedOut);
  });
  std::uint64_t length = 0;
  ASSERT_EQ(reader.begin(length, Clock::now() + 10s), Ring::Result::kDone);
  producer.join();
  Frame frame;
  EXPECT_EQ(readFrame(reader, length, wire::FrameLimits{}, 0, frame), Taken::kClosed);
}

// The real use: the segment crosses to another process over a Unix socket,
// each side writes one ring and reads the other.
TEST(ShmRing, ASegmentPassedToAnotherProcessCarriesAPingPong) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  Ring there = Ring::create(1 << 16), back = Ring::create(1 << 16);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(pair[0]);
    int exit = 1;
    try {
      Ring in = Ring::attach(receiveFd(pair[1]));
      Ring out = Ring::attach(receiveFd(pair[1]));
      std::vector<std::byte> got;
      for (int i = 0; i < 1000; ++i) {
        if (in.read(got, Clock::now() + 10s) != Ring::Result::kDone) ::_exit(2);
        got.push_back(std::byte{1});
        if (out.write(got, Clock::now() + 10s) != Ring::Result::kDone) ::_exit(3);
      }
      exit = 0;
    } catch (...) {
    }
    ::_exit(exit);
  }
  ::close(pair[1]);
  sendFd(pair[0], there.fd());
  sendFd(pair[0], back.fd());
  std::vector<std::byte> got;
  for (int i = 0; i < 1000; ++i) {
    auto record = pattern(static_cast<std::size_t>(i), static_cast<unsigned>(i));
    ASSERT_EQ(there.write(record, Clock::now() + 10s), Ring::Result::kDone);
    ASSERT_EQ(back.read(got, Clock::now() + 10s), Ring::Result::kDone);
    record.push_back(std::byte{1});
    ASSERT_EQ(got, record);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::close(pair[0]);
}

TEST(ShmRing, CloseWakesAWaitingReaderAndAWaitTimesOut) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  std::vector<std::byte> got;
  auto start = Clock::now();
  EXPECT_EQ(reader.read(got, start + 50ms), Ring::Result::kTimedOut);
  EXPECT_GE(Clock::now() - start, 50ms);
  ASSERT_EQ(writer.write(pattern(3, 0), Clock::now() + 1s), Ring::Result::kDone);
  std::thread closer([&] {
    std::this_thread::sleep_for(100ms);
    writer.close();
  });
  ASSERT_EQ(reader.read(got, Clock::now() + 10s), Ring::Result::kDone);  // what came before
  start = Clock::now();
  EXPECT_EQ(reader.read(got, Clock::now() + 10s), Ring::Result::kClosed);
  EXPECT_LT(Clock::now() - start, 2s);
  closer.join();
  EXPECT_EQ(writer.write(pattern(3, 0), Clock::now() + 1s), Ring::Result::kClosed);
}

TEST(ShmRing, AWriterBlockedOnAFullRingTimesOutAndClosesIt) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  EXPECT_EQ(writer.write(pattern(8192, 0), Clock::now() + 50ms), Ring::Result::kTimedOut);
  std::vector<std::byte> got;
  EXPECT_EQ(reader.read(got, Clock::now() + 1s), Ring::Result::kClosed);  // never half a record
}

double threadCpuMillis() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

TEST(ShmRing, AnIdleReaderSleepsInsteadOfSpinning) {
  Ring writer = Ring::create(4096);
  Ring reader = Ring::attach(::dup(writer.fd()));
  double used = 0;
  std::thread waiting([&] {
    double before = threadCpuMillis();
    std::vector<std::byte> got;
    EXPECT_EQ(reader.read(got, Clock::now() + 10s), Ring::Result::kDone);
    used = threadCpuMillis() - before;
  });
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(writer.write(pattern(1, 0), Clock::now() + 1s), Ring::Result::kDone);
  waiting.join();
  EXPECT_LT(used, 25.0) << "a reader idle for 0.5 s used " << used << " ms of CPU";
}

TEST(ShmRing, ASegmentThatIsNotASealedRingIsRefused) {
  int plain = ::memfd_create("not-a-ring", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(plain, 1 << 16), 0);
  EXPECT_THROW(Ring::attach(plain), ProtocolError);  // unsealed: it could shrink under us
  EXPECT_THROW(Ring::create(1000), ConfigError);
}

}  // namespace
}  // namespace crown::transport::shm
