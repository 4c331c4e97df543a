// Lent payloads (lending.h): a large frame's payload is read by the reader
// straight from the writer's memory, in another process, and the writer
// waits until it is given back; a reader the kernel will not let read the
// writer gets the frame again, copied, and so does every frame after it; a
// writer that gives up waiting closes the ring, so a late reader drops what
// it copied; a descriptor that breaks its format or the limits, or names
// memory the writer does not have, is refused.
#include <gtest/gtest.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "crown/common/error.h"
#include "transport/shm/lending.h"
#include "transport/shm/record.h"
#include "transport/shm/ring.h"

namespace crown::transport::shm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kLarge = 3 << 20;  // over lendFromBytes()' default

// A frame whose payload is a head and a segment held elsewhere (as Python's
// buffers are), with a pattern that tells every byte apart.
OutMessage largeMessage(unsigned seed) {
  auto owned = std::make_shared<std::string>(kLarge, '\0');
  for (std::size_t i = 0; i < owned->size(); ++i) (*owned)[i] = static_cast<char>(i * 7 + seed);
  wire::Payload payload(std::string("head:"));
  payload.append(owned, owned->data(), owned->size());
  return {{wire::MessageKind::kOneWay, {0, 1}, {1, 2}, 0, "crown::Bulk"}, std::move(payload)};
}

std::string joined(const OutMessage& message) {
  OutMessage copy = message;
  return std::move(copy.payload).join();
}

// Reads one record; kClosed when none came within 10 s.
Taken readOne(Ring& ring, pid_t lender, Frame& frame, std::uint64_t* length = nullptr) {
  std::uint64_t got = 0;
  if (ring.begin(got, Clock::now() + 10s) != Ring::Result::kDone) return Taken::kClosed;
  if (length) *length = got;
  return readFrame(ring, got, wire::FrameLimits{}, lender, frame);
}

TEST(ShmLending, ALargePayloadIsCopiedFromTheWritersProcessAndTheWriterWaitsForIt) {
  ASSERT_GE(kLarge, lendFromBytes()) << "CROWN_SHM_LEND_BYTES is set above this test's frame";
  Ring ring = Ring::create(1 << 16);
  OutMessage message = largeMessage(3);
  pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {  // the writer: a process of its own, as a peer rank is
    Ring::Result written = writeFrame(ring, message, Clock::now() + 20s);
    ::_exit(written == Ring::Result::kDone && !ring.lendingRefused() ? 0 : 1);
  }
  Frame frame;
  std::uint64_t length = 0;
  Taken taken = readOne(ring, writer, frame, &length);
  int status = 0;
  ::waitpid(writer, &status, 0);
  ASSERT_EQ(taken, Taken::kFrame);
  EXPECT_LT(length, 1024u) << "the record carried the payload instead of lending it";
  EXPECT_EQ(frame.envelope.type, "crown::Bulk");
  EXPECT_TRUE(frame.payload == joined(message));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the writer's send did not end when the reader gave its memory back";
}

TEST(ShmLending, AReaderTheKernelRefusesGetsTheFrameCopiedFromThenOn) {
  Ring ring = Ring::create(1 << 16);
  pid_t reader = ::fork();
  ASSERT_GE(reader, 0);
  if (reader == 0) {
    // Not allowed to read the writer: another user's process (as root), or
    // a writer that is not dumpable (set below) for a user without
    // CAP_SYS_PTRACE.
    if (::geteuid() == 0 && ::setresuid(65534, 65534, 65534) != 0) ::_exit(3);
    int good = 0;
    for (unsigned seed : {1u, 2u}) {
      Frame frame;
      Taken taken = readOne(ring, ::getppid(), frame);
      if (seed == 1 && taken == Taken::kAgain) taken = readOne(ring, ::getppid(), frame);
      good += taken == Taken::kFrame && frame.payload == joined(largeMessage(seed));
    }
    ::_exit(good == 2 ? 0 : 1);
  }
  int dumpable = ::prctl(PR_GET_DUMPABLE);
  ::prctl(PR_SET_DUMPABLE, 0);
  Ring::Result first = writeFrame(ring, largeMessage(1), Clock::now() + 20s);
  bool refused = ring.lendingRefused();
  Ring::Result second = writeFrame(ring, largeMessage(2), Clock::now() + 20s);
  ::prctl(PR_SET_DUMPABLE, dumpable);
  int status = 0;
  ::waitpid(reader, &status, 0);
  EXPECT_EQ(first, Ring::Result::kDone);
  EXPECT_EQ(second, Ring::Result::kDone);
  EXPECT_TRUE(refused) << "the reader could read the writer: the test did not refuse it";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the reader did not get both frames whole (3: setresuid)";
}

TEST(ShmLending, AWriterThatGivesUpClosesTheRingAndALateReaderDropsTheFrame) {
  Ring writer = Ring::create(1 << 16);
  Ring reader = Ring::attach(::dup(writer.fd()));
  OutMessage message = largeMessage(5);
  auto start = Clock::now();
  EXPECT_EQ(writeFrame(writer, message, Clock::now() + 200ms), Ring::Result::kTimedOut);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_TRUE(writer.closed());
  Frame frame;
  EXPECT_EQ(readOne(reader, ::getpid(), frame), Taken::kClosed);
}

// A lent record made by hand: the envelope of largeMessage, then `descriptor`.
std::string lentRecord(const std::string& descriptor) {
  OutMessage message = largeMessage(0);
  std::string head;
  std::string record(reinterpret_cast<const char*>(lentRecordParts(message, head)[0].data()),
                     4 + wire::encodedSize(message.envelope));
  return record + descriptor;
}

std::string descriptorOf(std::vector<std::pair<std::uint64_t, std::uint64_t>> pieces,
                         std::uint32_t count) {
  std::string out(reinterpret_cast<const char*>(&count), 4);
  for (auto [address, bytes] : pieces) {
    out.append(reinterpret_cast<const char*>(&address), 8);
    out.append(reinterpret_cast<const char*>(&bytes), 8);
  }
  return out;
}

TEST(ShmLending, ABadDescriptorIsRefused) {
  static const char kept[64] = "memory the writer has";
  auto at = reinterpret_cast<std::uintptr_t>(kept);
  struct Case {
    std::string what;
    std::string descriptor;
    std::string says;
  };
  std::vector<Case> cases = {
      {"a count that does not match", descriptorOf({{at, 8}}, 2), "for 2 pieces"},
      {"more bytes than the limit", descriptorOf({{at, 8}, {at, 2000}}, 2), "2008"},
      {"memory the writer lacks", descriptorOf({{0x10, 16}}, 1), "does not have"},
  };
  for (const Case& bad : cases) {
    Ring writer = Ring::create(1 << 16);
    Ring reader = Ring::attach(::dup(writer.fd()));
    std::string record = lentRecord(bad.descriptor);
    ASSERT_EQ(writer.write(std::as_bytes(std::span(record)), Clock::now() + 1s),
              Ring::Result::kDone);
    std::uint64_t length = 0;
    ASSERT_EQ(reader.begin(length, Clock::now() + 1s), Ring::Result::kDone);
    wire::FrameLimits limits;
    limits.maxPayloadBytes = 1000;
    Frame frame;
    try {
      readFrame(reader, length, limits, ::getpid(), frame);
      ADD_FAILURE() << bad.what << " was read as a frame";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.says), std::string::npos)
          << bad.what << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace crown::transport::shm
