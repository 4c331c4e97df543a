// RDMA buffers of device memory (issue 12), with a stand-in device: its
// memory is a PROT_NONE reservation whose bytes live in a shadow mapping
// that only DeviceMemory::copy reaches, so any path in crown that touched
// device memory directly (a memcpy, MPI) would fault. This MPI is not
// CUDA-aware, so a device buffer is staged through a pinned mirror (checked
// in the stats), and device memory of a reader goes through a bounce buffer.
// Run twice by ctest: over the MPI window, and over the fabric fallback
// (CROWN_RDMA_WINDOW=0, CROWN_TEST_EXPECT_WINDOW=0: no mirror, copies).
#include <sys/mman.h>

#include <crown/rdma/device_memory.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "rdma_test_support.h"

namespace crown::testing {
namespace {

using namespace std::chrono_literals;

class StandInDevice final : public rdma::DeviceMemory {
 public:
  static constexpr std::size_t kSpace = std::size_t{1} << 30;

  StandInDevice() {
    space_ = map(PROT_NONE);
    shadow_ = map(PROT_READ | PROT_WRITE);
  }
  void* allocate(std::size_t bytes) {
    std::size_t at = next_.fetch_add((bytes + 4095) / 4096 * 4096);
    if (at + bytes > kSpace) throw Error("the stand-in device is full");
    return space_ + at;
  }
  bool isDevice(const void* p) const override {
    auto* c = static_cast<const char*>(p);
    return c >= space_ && c < space_ + kSpace;
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(real(dst), real(src), bytes);
  }
  void* allocateStaging(std::size_t bytes) override {
    ++stagingLive_;
    return ::operator new(bytes);
  }
  void freeStaging(void* p, std::size_t) override {
    --stagingLive_;
    ::operator delete(p);
  }
  std::int64_t stagingLive() const { return stagingLive_; }

 private:
  static char* map(int protection) {
    void* p = mmap(nullptr, kSpace, protection, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw Error("mmap of the stand-in device failed");
    return static_cast<char*>(p);
  }
  void* real(void* p) const { return isDevice(p) ? shadow_ + (static_cast<char*>(p) - space_) : p; }
  const void* real(const void* p) const { return real(const_cast<void*>(p)); }

  char* space_ = nullptr;
  char* shadow_ = nullptr;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::int64_t> stagingLive_{0};
};

StandInDevice& device() {
  static auto* one = new StandInDevice;  // used until exit: never destroyed
  return *one;
}

// Registered before main on every rank (replacing CUDA's, when this build has it).
const bool kRegistered = [] {
  rdma::registerDeviceMemory(std::shared_ptr<rdma::DeviceMemory>(&device(), [](auto*) {}));
  return true;
}();

// A host vector and the device memory it is copied to or from.
std::vector<std::uint8_t> pattern(std::size_t bytes, std::uint8_t seed) {
  std::vector<std::uint8_t> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = patternAt(i, seed);
  return out;
}
std::vector<std::uint8_t> hostCopy(const void* deviceMemory, std::size_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  device().copy(out.data(), deviceMemory, bytes);
  return out;
}
std::uint64_t wrongBytes(const std::vector<std::uint8_t>& got, std::uint8_t seed,
                         std::size_t bytes) {
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += got[i] != patternAt(i, seed);
  return wrong;
}

struct Publish {  // device memory of `bytes`, filled with the pattern of `seed`
  std::uint64_t bytes = 0;
  std::uint8_t seed = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& bytes& seed;
  }
};
struct ReadCheck {  // read the buffer into host or device memory; the bytes that differ
  rdma::Buffer buffer;
  std::uint8_t seed = 0;
  bool intoDevice = false;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& buffer& seed& intoDevice;
  }
};
struct Write {  // write `bytes` bytes of the pattern of `seed` (or of one value) from memory
  rdma::Buffer buffer;
  std::uint8_t seed = 0;
  std::uint64_t bytes = 0;
  bool fromDevice = false;
  bool uniform = false;  // every byte is `seed`
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& buffer& seed& bytes& fromDevice& uniform;
  }
};
struct CheckOwn {  // the owner's device memory against a pattern
  std::uint8_t seed = 0;
  std::uint64_t from = 0;
  std::uint64_t bytes = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& seed& from& bytes;
  }
};
struct DropOwn {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};
struct Numbers {
  std::uint64_t registered = 0, staged = 0, leases = 0, attached = 0, fallback = 0;
  std::int64_t stagingLive = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& registered& staged& leases& attached& fallback& stagingLive;
  }
};
struct AskNumbers {
  template <class Archive>
  void serialize(Archive&, unsigned) {}
};

Numbers numbersHere() {
  auto s = rdma::stats(Proc::current());
  return Numbers{s.registered,          s.staged, s.leases, s.attached, s.fallbackTransfers,
                 device().stagingLive()};
}

class DeviceHolder : public Actor {
 public:
  DeviceHolder() {
    handle<Publish>([this](const Publish& p) {
      memory_ = device().allocate(p.bytes);
      auto host = pattern(p.bytes, p.seed);
      device().copy(memory_, host.data(), p.bytes);
      buffer_ = rdma::Buffer::registerMemory(memory_, p.bytes);
      return buffer_;
    });
    handle<ReadCheck>([](const ReadCheck& r) {
      std::size_t n = r.buffer.size();
      if (!r.intoDevice) {
        std::vector<std::uint8_t> into(n, 0);
        r.buffer.readInto(into.data(), n, 30s).get();
        return wrongBytes(into, r.seed, n);
      }
      void* into = device().allocate(n);
      r.buffer.readInto(into, n, 30s).get();
      return wrongBytes(hostCopy(into, n), r.seed, n);
    });
    handle<Write>([](const Write& w) {
      auto host = w.uniform ? std::vector<std::uint8_t>(w.bytes, w.seed) : pattern(w.bytes, w.seed);
      if (!w.fromDevice) return w.buffer.writeFrom(host.data(), w.bytes, 30s).get();
      void* from = device().allocate(w.bytes);
      device().copy(from, host.data(), w.bytes);
      w.buffer.writeFrom(from, w.bytes, 30s).get();
    });
    handle<CheckOwn>([this](const CheckOwn& c) {
      auto got = hostCopy(static_cast<char*>(memory_) + c.from, c.bytes);
      std::uint64_t wrong = 0;
      for (std::size_t i = 0; i < c.bytes; ++i) wrong += got[i] != patternAt(c.from + i, c.seed);
      return wrong;
    });
    handle<DropOwn>([this](const DropOwn&) { buffer_.drop().get(10s); });
    handle<AskNumbers>([](const AskNumbers&) { return numbersHere(); });
  }
  ~DeviceHolder() override {
    if (buffer_.valid()) buffer_.dropBecause("dropped when its owner actor stopped").get(10s);
  }

 private:
  void* memory_ = nullptr;  // the stand-in never frees: nothing to give back
  rdma::Buffer buffer_;
};

class RdmaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Controller& ctl = *controller();
    ASSERT_GE(ctl.size(), 3u);
    holders_ = ctl.spawnOnEveryRank<DeviceHolder>("device-holder-" + std::to_string(next_++));
  }
  void TearDown() override {
    for (auto& h : holders_) {
      try {
        stopActor(h.id());
      } catch (const std::exception&) {
        // stopped by the test already
      }
    }
  }
  Numbers numbersOf(int rank) { return holders_[rank].call<Numbers>(AskNumbers{}).get(10s); }
  std::vector<ActorRef<DeviceHolder>> holders_;
  static inline int next_ = 0;
};

TEST_F(RdmaDeviceTest, ADeviceBufferIsReadIntoHostAndDeviceMemoryOnEveryProc) {
  constexpr std::size_t kBytes = (9 << 20) + 4321;  // more than one chunk, an odd tail
  auto before = numbersOf(1);
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{kBytes, 7}).get(30s);
  auto published = numbersOf(1);
  // Without a CUDA-aware MPI the window exposes a pinned mirror.
  EXPECT_EQ(published.staged, before.staged + (expectWindow() ? 1 : 0));
  EXPECT_EQ(published.stagingLive, before.stagingLive + (expectWindow() ? 1 : 0));
  for (bool intoDevice : {false, true}) {
    EXPECT_EQ(holders_[2].call<std::uint64_t>(ReadCheck{handle, 7, intoDevice}).get(60s), 0u)
        << "another rank, into " << (intoDevice ? "device" : "host") << " memory";
    EXPECT_EQ(holders_[1].call<std::uint64_t>(ReadCheck{handle, 7, intoDevice}).get(60s), 0u)
        << "the owner's own proc, into " << (intoDevice ? "device" : "host") << " memory";
  }
  // The controller, into device memory: its bounce buffer is gone afterwards.
  void* here = device().allocate(kBytes);
  handle.readInto(here, kBytes, 30s).get();
  EXPECT_EQ(wrongBytes(hostCopy(here, kBytes), 7, kBytes), 0u);
  EXPECT_EQ(numbersHere().stagingLive, 0);
  EXPECT_EQ(numbersHere().fallback > 0, !expectWindow());
}

TEST_F(RdmaDeviceTest, WritesFromHostAndDeviceMemoryLandOnTheDevice) {
  constexpr std::size_t kBytes = 5 << 20;
  rdma::Buffer handle = holders_[2].call<rdma::Buffer>(Publish{kBytes, 1}).get(30s);
  auto host = pattern(kBytes, 99);
  handle.writeFrom(host.data(), kBytes, 30s).get();
  EXPECT_EQ(holders_[2].call<std::uint64_t>(CheckOwn{99, 0, kBytes}).get(30s), 0u);
  // A shorter write from another rank's device memory changes only the start.
  holders_[1].call<void>(Write{handle, 5, 1000, true, false}).get(30s);
  EXPECT_EQ(holders_[2].call<std::uint64_t>(CheckOwn{5, 0, 1000}).get(30s), 0u);
  EXPECT_EQ(holders_[2].call<std::uint64_t>(CheckOwn{99, 1000, kBytes - 1000}).get(30s), 0u);
  // And the owner's own proc writes from device memory.
  holders_[2].call<void>(Write{handle, 42, kBytes, true, false}).get(30s);
  EXPECT_EQ(holders_[2].call<std::uint64_t>(CheckOwn{42, 0, kBytes}).get(30s), 0u);
}

// Issue 43: a handle edited to name the second half of a device buffer
// reaches that half only (the owner stages the lease's part of the mirror);
// one that reaches past the buffer is refused before anything moves.
TEST_F(RdmaDeviceTest, AHandleOnPartOfADeviceBufferReachesThatPartOnly) {
  constexpr std::size_t kBytes = 1 << 20, kHalf = kBytes / 2;
  rdma::Buffer whole = holders_[1].call<rdma::Buffer>(Publish{kBytes, 7}).get(30s);
  auto part = [&](std::uint64_t offset, std::uint64_t bytes) {
    return rdma::Buffer(whole.owner(), whole.ownerActor(), whole.address() + offset, bytes,
                        whole.id(), whole.readOnly());
  };
  rdma::Buffer half = part(kHalf, kHalf);
  std::vector<std::uint8_t> got(kHalf, 0);
  half.readInto(got.data(), kHalf, 30s).get();
  for (std::size_t i = 0; i < kHalf; ++i) ASSERT_EQ(got[i], patternAt(kHalf + i, 7)) << i;
  std::vector<std::uint8_t> put(kHalf);
  for (std::size_t i = 0; i < kHalf; ++i) put[i] = patternAt(kHalf + i, 55);
  half.writeFrom(put.data(), kHalf, 30s).get();
  EXPECT_EQ(holders_[1].call<std::uint64_t>(CheckOwn{55, kHalf, kHalf}).get(30s), 0u);
  EXPECT_EQ(holders_[1].call<std::uint64_t>(CheckOwn{7, 0, kHalf}).get(30s), 0u);
  rdma::Buffer past = part(kHalf, kBytes);
  std::vector<std::uint8_t> into(kBytes, 0xEE);
  EXPECT_THROW(past.readInto(into.data(), kBytes, 10s).get(), rdma::BufferError);
  EXPECT_EQ(std::count(into.begin(), into.end(), 0xEE), static_cast<long>(kBytes));
  EXPECT_THROW(past.writeFrom(into.data(), kBytes, 10s).get(), rdma::BufferError);
  EXPECT_EQ(holders_[1].call<std::uint64_t>(CheckOwn{55, kHalf, kHalf}).get(30s), 0u);
  EXPECT_EQ(holders_[1].call<std::uint64_t>(CheckOwn{7, 0, kHalf}).get(30s), 0u);
}

// The staging lock: a read overlapping writes of whole buffers of one value
// sees one of those values in every byte, never the bytes of two.
TEST_F(RdmaDeviceTest, AReadNeverSeesHalfAWrite) {
  constexpr std::size_t kBytes = 4 << 20;
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{kBytes, 0}).get(30s);
  holders_[1].call<void>(Write{handle, 0, kBytes, false, true}).get(30s);  // all zero
  std::vector<std::uint8_t> into(kBytes);
  int mixed = 0;
  for (int i = 1; i <= 25; ++i) {
    auto writing = holders_[2].call<void>(
        Write{handle, static_cast<std::uint8_t>(i), kBytes, i % 2 == 0, true});
    for (int r = 0; r < 3; ++r) {
      handle.readInto(into.data(), kBytes, 30s).get();
      mixed += std::count(into.begin(), into.end(), into[0]) != static_cast<long>(kBytes);
      EXPECT_LE(into[0], i);
    }
    writing.get(30s);
  }
  EXPECT_EQ(mixed, 0) << "reads saw the bytes of two writes";
  handle.readInto(into.data(), kBytes, 30s).get();
  EXPECT_EQ(std::count(into.begin(), into.end(), 25), static_cast<long>(kBytes));
}

TEST_F(RdmaDeviceTest, ATimeoutLeavesTheBufferUsableAndTheLockFree) {
  constexpr std::size_t kBytes = 64 << 20;
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{kBytes, 8}).get(60s);
  std::vector<std::uint8_t> into(kBytes);
  EXPECT_THROW(handle.readInto(into.data(), kBytes, 1ms).get(), Timeout);
  EXPECT_THROW(handle.writeFrom(into.data(), kBytes, 1ms).get(), Timeout);
  // Whatever the timed-out transfers held comes back: later ones go through.
  handle.readInto(into.data(), kBytes, 60s).get();
  auto expected = pattern(kBytes, 8);
  // Staged, a timed-out write never lands half: the device holds the old
  // bytes or all new ones (zeros). (Over the fallback, the chunks that
  // landed before the deadline stay, as for host memory.)
  if (expectWindow()) {
    bool old = std::equal(into.begin(), into.end(), expected.begin());
    bool zeros = std::count(into.begin(), into.end(), 0) == static_cast<long>(kBytes);
    EXPECT_TRUE(old || zeros) << "a timed-out write left part of itself";
  }
  holders_[2].call<void>(Write{handle, 3, kBytes, false, false}).get(60s);
  EXPECT_EQ(holders_[1].call<std::uint64_t>(CheckOwn{3, 0, kBytes}).get(60s), 0u);
}

TEST_F(RdmaDeviceTest, ADropFreesTheMirrorAndLeavesNothingBehind) {
  // A dropped region leaves the window, and its mirror is freed, on the
  // pool just after its drop completes: read the counters once they settle.
  auto ownerNumbers = [this] { return numbersOf(1); };
  auto before =
      eventually(ownerNumbers, [](const Numbers& n) { return n.attached <= n.registered; });
  rdma::Buffer handle = holders_[1].call<rdma::Buffer>(Publish{1 << 20, 4}).get(30s);
  EXPECT_EQ(holders_[2].call<std::uint64_t>(ReadCheck{handle, 4, true}).get(30s), 0u);
  holders_[1].call<void>(DropOwn{}).get(10s);
  std::vector<std::uint8_t> into(1 << 20);
  EXPECT_THROW(handle.readInto(into.data(), into.size(), 10s).get(), rdma::BufferError);
  auto after = eventually(ownerNumbers, [&](const Numbers& n) {
    return n.registered == before.registered && n.attached == before.attached &&
           n.stagingLive == before.stagingLive;
  });
  EXPECT_EQ(after.registered, before.registered);
  EXPECT_EQ(after.staged, before.staged);
  EXPECT_EQ(after.attached, before.attached);
  EXPECT_EQ(after.stagingLive, before.stagingLive) << "the pinned mirror was not freed";
  EXPECT_EQ(numbersOf(2).stagingLive, 0) << "a reader's bounce buffer was not freed";
}

}  // namespace
}  // namespace crown::testing

int main(int argc, char** argv) { return crown::testing::runTestsOnController(argc, argv); }
