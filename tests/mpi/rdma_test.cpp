// RDMA buffers across real ranks (issue 12): an actor registers memory and
// returns the handle; the controller passes it to an actor on another rank,
// which reads it; writes land; every error is the one the issue names; and
// nothing stays attached or leased. Run three times by ctest: over the MPI
// window; with CROWN_RDMA_WINDOW=0 (the fabric fallback), which the test
// checks it is on through CROWN_TEST_EXPECT_WINDOW; and with
// CROWN_RDMA_SAME_HOST=mpi (CROWN_TEST_EXPECT_SINGLE_COPY=0), where MPI moves
// the bytes between ranks of this machine instead of a single copy.
#include <cstdlib>
#include <cstring>

#include <algorithm>

#include "rdma_test_support.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

struct Publish {
  std::uint64_t bytes = 0;
  std::uint8_t seed = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& bytes& seed;
  }
};
struct ReadCheck {  // read the buffer, check its pattern; returns the bytes that differ
  rdma::Buffer buffer;
  std::uint8_t seed = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& buffer& seed;
  }
};
struct CheckOwn {  // the publisher's own memory against a pattern
  std::uint8_t seed = 0;
  std::uint64_t bytes = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& seed& bytes;
  }
};
struct DropOwn {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct RdmaStats {
  std::uint64_t registered = 0, leases = 0, attached = 0, fallback = 0, held = 0, inFlight = 0;
  std::uint64_t singleCopy = 0, deadlines = 0;
  bool window = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& registered& leases& attached& fallback& held& inFlight& singleCopy& deadlines& window;
  }
};
struct AskStats {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
// Guarded memory (issue 43): an arena of kGuard bytes, the registered region,
// kGuard bytes; guards and region filled with known bytes.
constexpr std::size_t kGuard = 4096;
constexpr std::size_t kRegion = 4096;
struct PublishArena {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct CheckArena {  // how many bytes of the arena differ from what it was filled with
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct TryTransfer {  // one transfer of `buffer`: "" when it moved, else the error's kind and text
  rdma::Buffer buffer;
  bool write = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& buffer& write;
  }
};

std::uint8_t arenaAt(std::size_t i) {
  return i < kGuard || i >= kGuard + kRegion ? 0xA5 : patternAt(i - kGuard, 17);
}

// Reads or writes `buffer` (from memory of 0xEE, or of 0x77), then says how
// it went; a transfer that failed must have left that memory as it was.
std::string tryTransfer(const rdma::Buffer& buffer, bool write) {
  using namespace std::chrono_literals;
  std::uint8_t fill = write ? 0x77 : 0xEE;
  std::vector<std::uint8_t> local(buffer.size(), fill);
  std::string outcome;
  try {
    if (write) {
      buffer.writeFrom(local.data(), local.size(), 20s).get(30s);
    } else {
      buffer.readInto(local.data(), local.size(), 20s).get(30s);
    }
  } catch (const rdma::BufferError& e) {
    outcome = std::string("BufferError: ") + e.what();
  } catch (const std::exception& e) {
    outcome = std::string("another error: ") + e.what();
  }
  if (outcome.empty()) return outcome;
  if (std::count(local.begin(), local.end(), fill) != static_cast<long>(local.size()))
    outcome += " (and the local memory changed)";
  return outcome;
}

RdmaStats statsHere() {
  auto s = rdma::stats(Proc::current());
  return RdmaStats{s.registered,          s.leases,    s.attached,
                   s.fallbackTransfers,   s.held,      s.inFlight,
                   s.singleCopyTransfers, s.deadlines, s.window};
}

// A dropped region leaves the window just after its drop completes (on the
// pool), so an attachment may outlive its registration for a moment.
bool noDetachPending(const RdmaStats& s) { return s.attached <= s.registered; }
bool sameMemory(const RdmaStats& a, const RdmaStats& b) {
  return a.registered == b.registered && a.attached == b.attached;
}

class Holder : public Actor {
 public:
  Holder() {
    handle<Publish>([this](const Publish& p) {
      memory_.resize(p.bytes);
      for (std::size_t i = 0; i < memory_.size(); ++i) memory_[i] = patternAt(i, p.seed);
      buffer_ = rdma::Buffer::registerMemory(memory_.data(), memory_.size());
      return buffer_;
    });
    handle<ReadCheck>([](const ReadCheck& r) {
      std::vector<std::uint8_t> into(r.buffer.size(), 0);
      r.buffer.readInto(into.data(), into.size(), 30s).get();
      std::uint64_t wrong = 0;
      for (std::size_t i = 0; i < into.size(); ++i) wrong += into[i] != patternAt(i, r.seed);
      return wrong;
    });
    handle<CheckOwn>([this](const CheckOwn& c) {
      std::uint64_t wrong = 0;
      for (std::size_t i = 0; i < c.bytes; ++i) wrong += memory_[i] != patternAt(i, c.seed);
      return wrong;
    });
    handle<DropOwn>([this](const DropOwn&) { buffer_.drop().get(10s); });
    handle<AskStats>([](const AskStats&) { return statsHere(); });
    handle<PublishArena>([this](const PublishArena&) {
      arena_.resize(kGuard + kRegion + kGuard);
      for (std::size_t i = 0; i < arena_.size(); ++i) arena_[i] = arenaAt(i);
      arenaBuffer_ = rdma::Buffer::registerMemory(arena_.data() + kGuard, kRegion);
      return arenaBuffer_;
    });
    handle<CheckArena>([this](const CheckArena&) {
      std::uint64_t changed = 0;
      for (std::size_t i = 0; i < arena_.size(); ++i) changed += arena_[i] != arenaAt(i);
      return changed;
    });
    handle<TryTransfer>([](const TryTransfer& t) { return tryTransfer(t.buffer, t.write); });
  }
  // memory_ goes with the actor: its registration must end first, and any
  // transfer from it with it (buffer.h).
  ~Holder() override {
    if (buffer_.valid()) buffer_.dropBecause("dropped when its owner actor stopped").get(10s);
    if (arenaBuffer_.valid()) arenaBuffer_.dropBecause("dropped with its owner").get(10s);
  }

 private:
  std::vector<std::uint8_t> memory_;
  rdma::Buffer buffer_;
  std::vector<std::uint8_t> arena_;
  rdma::Buffer arenaBuffer_;
};

// A single copy moves the bytes between ranks of one machine over the
// window, unless told otherwise (CROWN_RDMA_SAME_HOST=mpi, other hosts).
bool expectSingleCopy() {
  const char* v = std::getenv("CROWN_TEST_EXPECT_SINGLE_COPY");
  return expectWindow() && (v == nullptr || std::string(v) != "0");
}

class RdmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Controller& ctl = *controller();
    ASSERT_GE(ctl.size(), 3u);
    holders_ = ctl.spawnOnEveryRank<Holder>("holder-" + std::to_string(next_++));
  }
  void TearDown() override {
    for (auto& h : holders_) {  // drops what they registered
      try {
        stopActor(h.id());
      } catch (const std::exception&) {
        // stopped by the test already
      }
    }
    // Their buffers' leases come back to their owners (revoked, released):
    // the next test starts with none held here.
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (statsHere().held != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    EXPECT_EQ(statsHere().held, 0u) << "the controller still holds leases of stopped actors";
  }
  std::vector<ActorRef<Holder>> holders_;
  static inline int next_ = 0;
};

TEST_F(RdmaTest, UsesTheTransportItWasToldTo) {
  std::cout << "rdma test: " << controller()->size() << " ranks on "
            << controller()->topology().hostCount << " host(s)" << std::endl;
  EXPECT_EQ(statsHere().window, expectWindow());
  EXPECT_EQ(holders_[1].call<RdmaStats>(AskStats{}).get(10s).window, expectWindow());
}

TEST_F(RdmaTest, AHandleTravelsFromOwnerToControllerToAReader) {
  constexpr std::size_t kBytes = (24 << 20) + 12345;  // several chunks, an odd tail
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{kBytes, 7}).get(30s);
  EXPECT_EQ(handle.owner(), 1u);
  EXPECT_EQ(handle.size(), kBytes);
  EXPECT_EQ(holders_[2].call<std::uint64_t>(ReadCheck{handle, 7}).get(60s), 0u);
  // The controller reads it too, into memory larger than the buffer.
  std::vector<std::uint8_t> here(kBytes + 100, 0xEE);
  handle.readInto(here.data(), here.size(), 30s).get();
  for (std::size_t i = 0; i < kBytes; i += 4093) ASSERT_EQ(here[i], patternAt(i, 7)) << i;
  EXPECT_EQ(here[kBytes], 0xEE);  // nothing past the buffer's size
  // And the owner's own proc reads it (no MPI: a copy under the lease).
  EXPECT_EQ(holders_[1].call<std::uint64_t>(ReadCheck{handle, 7}).get(30s), 0u);
  // Later reads reuse the lease the first one got: the owner granted one
  // per reading proc, whatever the number of reads.
  for (int i = 0; i < 5; ++i) handle.readInto(here.data(), here.size(), 30s).get();
  EXPECT_EQ(holders_[1].call<RdmaStats>(AskStats{}).get(10s).leases, 3u);  // ranks 0, 1, 2
  EXPECT_EQ(statsHere().inFlight, 0u);
  EXPECT_EQ(statsHere().fallback > 0, !expectWindow());
  EXPECT_EQ(statsHere().singleCopy > 0, expectSingleCopy());
}

// Every transfer's timeout goes with it: a loop of small reads leaves no
// deadline armed (one timer per transfer would hold each for 60 s).
TEST_F(RdmaTest, ManySmallReadsLeaveNoDeadlineBehind) {
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{4096, 6}).get(30s);
  std::vector<std::uint8_t> into(4096);
  auto before = statsHere();
  for (int i = 0; i < 5000; ++i) handle.readInto(into.data(), into.size(), 60s).get();
  auto after = eventually(statsHere, [](const RdmaStats& s) { return s.deadlines == 0; });
  EXPECT_EQ(after.deadlines, 0u);
  EXPECT_EQ(after.inFlight, 0u);
  EXPECT_EQ(after.singleCopy - before.singleCopy, expectSingleCopy() ? 5000u : 0u);
  for (std::size_t i = 0; i < into.size(); ++i) ASSERT_EQ(into[i], patternAt(i, 6)) << i;
}

TEST_F(RdmaTest, WriteFromLandsInTheOwnersMemory) {
  constexpr std::size_t kBytes = 9 << 20;
  rdma::Buffer handle = holders_[2].call<rdma::Buffer>(Publish{kBytes, 1}).get(30s);
  std::vector<std::uint8_t> data(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) data[i] = patternAt(i, 99);
  handle.writeFrom(data.data(), data.size(), 30s).get();
  EXPECT_EQ(holders_[2].call<std::uint64_t>(CheckOwn{99, kBytes}).get(30s), 0u);
  // A shorter write changes only the start.
  std::vector<std::uint8_t> small(1000);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = patternAt(i, 5);
  handle.writeFrom(small.data(), small.size(), 30s).get();
  EXPECT_EQ(holders_[2].call<std::uint64_t>(CheckOwn{5, 1000}).get(30s), 0u);
}

TEST_F(RdmaTest, ATooSmallDestinationFailsBeforeAnythingMoves) {
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{4096, 3}).get(30s);
  std::vector<std::uint8_t> small(4095, 0xAB);
  EXPECT_THROW(handle.readInto(small.data(), small.size(), 10s), ConfigError);
  EXPECT_EQ(std::count(small.begin(), small.end(), 0xAB), 4095);
  std::vector<std::uint8_t> large(4097);
  EXPECT_THROW(handle.writeFrom(large.data(), large.size(), 10s), ConfigError);
  EXPECT_THROW(rdma::Buffer::registerMemory(small.data(), 0), ConfigError);
}

TEST_F(RdmaTest, ADroppedBufferFailsClearlyAndIsDetached) {
  auto ownerStats = [&] { return holders_[1].call<RdmaStats>(AskStats{}).get(10s); };
  auto before = eventually(ownerStats, noDetachPending);
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{1 << 20, 4}).get(30s);
  // Read first, so that readers hold leases the drop has to revoke.
  EXPECT_EQ(holders_[2].call<std::uint64_t>(ReadCheck{handle, 4}).get(30s), 0u);
  std::vector<std::uint8_t> first(1 << 20);
  handle.readInto(first.data(), first.size(), 10s).get();
  EXPECT_EQ(statsHere().held, 1u);
  holders_[1].call<void>(DropOwn{}).get(10s);  // completes once every reader gave its lease back
  EXPECT_EQ(statsHere().held, 0u);
  std::vector<std::uint8_t> into(1 << 20, 0x11);
  try {
    handle.readInto(into.data(), into.size(), 10s).get();
    FAIL() << "a read of a dropped buffer succeeded";
  } catch (const rdma::BufferError& e) {
    EXPECT_NE(std::string(e.what()).find("was dropped"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::count(into.begin(), into.end(), 0x11), 1 << 20);  // never garbage
  auto after = eventually(ownerStats, [&](const RdmaStats& s) { return sameMemory(s, before); });
  EXPECT_EQ(after.registered, before.registered);
  EXPECT_EQ(after.attached, before.attached);
  EXPECT_EQ(after.leases, before.leases);
  handle.drop().get(10s);  // idempotent, from another proc
}

TEST_F(RdmaTest, ABufferOfAStoppedActorIsDropped) {
  rdma::Buffer handle = holders_[2].call<rdma::Buffer>(Publish{1 << 16, 4}).get(30s);
  stopActor(holders_[2].id());
  std::vector<std::uint8_t> into(1 << 16);
  try {
    handle.readInto(into.data(), into.size(), 10s).get();
    FAIL() << "a read of a stopped actor's buffer succeeded";
  } catch (const rdma::BufferError& e) {
    EXPECT_NE(std::string(e.what()).find("owner actor stopped"), std::string::npos) << e.what();
  }
}

TEST_F(RdmaTest, ATimeoutFailsTheTransferAndLeavesTheBufferUsable) {
  constexpr std::size_t kBytes = 256 << 20;
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{kBytes, 8}).get(60s);
  std::vector<std::uint8_t> into(kBytes);
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(handle.readInto(into.data(), into.size(), 1ms).get(), Timeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  // The abandoned transfer ends once its bytes in flight have (no new chunk
  // is posted after the deadline).
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (statsHere().inFlight != 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a transfer outlived its timeout";
    std::this_thread::sleep_for(10ms);
  }
  handle.readInto(into.data(), into.size(), 60s).get();
  for (std::size_t i = 0; i < kBytes; i += 65521) ASSERT_EQ(into[i], patternAt(i, 8)) << i;
}

// Issue 43: a handle is data; one edited to name other memory of the owner
// (next to its region, below it, unmapped, larger) is refused by the owner
// with BufferError, and no byte of the guards around the region moves, from
// another rank, from the controller or from the owner's own proc.
TEST_F(RdmaTest, EditedHandlesMoveNoByteOutsideTheirRegion) {
  rdma::Buffer good = holders_[1].call<rdma::Buffer>(PublishArena{}).get(30s);
  auto edit = [&](std::uint64_t address, std::uint64_t bytes) {
    return rdma::Buffer(good.owner(), good.ownerActor(), address, bytes, good.id(),
                        good.readOnly());
  };
  std::vector<std::pair<std::string, rdma::Buffer>> edits = {
      {"+4 KiB", edit(good.address() + kGuard, kRegion)},
      {"-4 KiB", edit(good.address() - kGuard, kRegion)},
      {"+1 byte", edit(good.address() + 1, kRegion)},
      {"unmapped", edit(4096, kRegion)},
      {"grown", edit(good.address(), kRegion + 1)},
  };
  auto singleCopies = statsHere().singleCopy;
  for (const auto& [what, handle] : edits) {
    for (bool write : {false, true}) {
      std::string where = what + (write ? " write" : " read");
      std::string here = tryTransfer(handle, write);
      EXPECT_EQ(here.rfind("BufferError: ", 0), 0u) << where << " from the controller: " << here;
      for (std::size_t rank : {1, 2}) {
        std::string there = holders_[rank].call<std::string>(TryTransfer{handle, write}).get(60s);
        EXPECT_EQ(there.rfind("BufferError: ", 0), 0u)
            << where << " from rank " << rank << ": " << there;
      }
      EXPECT_EQ(holders_[1].call<std::uint64_t>(CheckArena{}).get(30s), 0u)
          << where << ": bytes of the owner's arena changed";
    }
  }
  // The real handle still moves, with single copies still on.
  std::vector<std::uint8_t> into(kRegion);
  good.readInto(into.data(), into.size(), 10s).get();
  for (std::size_t i = 0; i < kRegion; ++i) ASSERT_EQ(into[i], arenaAt(kGuard + i)) << i;
  EXPECT_EQ(statsHere().singleCopy - singleCopies, expectSingleCopy() ? 1u : 0u);
}

TEST_F(RdmaTest, ManyRegistrationsLeaveNothingBehind) {
  auto before = eventually(statsHere, noDetachPending);
  std::vector<std::uint8_t> memory(4096);
  for (int i = 0; i < 2000; ++i) {
    auto b = rdma::Buffer::registerMemory(memory.data() + (i % 7), 1000);
    b.drop().get(10s);
  }
  auto after = eventually(statsHere, [&](const RdmaStats& s) { return sameMemory(s, before); });
  EXPECT_EQ(after.registered, before.registered);
  EXPECT_EQ(after.attached, before.attached);
  EXPECT_EQ(after.leases, 0u);
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
