// The shared-memory ring (ring.h). The segment's first page is the header;
// the data follow. Counters only grow (head: bytes written, tail: bytes
// read), so free room is capacity - (head - tail) with no wrap to tell
// apart. The waiting is Dekker-style on seq_cst atomics: a sleeper says so,
// then looks again; a publisher publishes, bumps the futex word, then looks
// whether anyone sleeps. A sleep is also bounded (kLongestSleep), so even a
// wake lost to a bug or a dead peer costs a pause, not a hang.
#include "transport/shm/ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "crown/common/error.h"

namespace crown::transport::shm {
namespace {

constexpr std::uint64_t kMagic = 0x63726f776e52696eull;  // a crown ring's header
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::chrono::milliseconds kLongestSleep{100};
constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

void futexWait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
               std::chrono::nanoseconds most) {
  timespec bound{static_cast<time_t>(most.count() / 1'000'000'000),
                 static_cast<long>(most.count() % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &bound, nullptr,
            0);
}

void futexWake(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::string errorText() { return std::strerror(errno); }

}  // namespace

struct Ring::Header {
  std::uint64_t magic;
  std::uint64_t capacity;
  alignas(64) std::atomic<std::uint64_t> head;      // the writer's
  alignas(64) std::atomic<std::uint64_t> tail;      // the reader's
  alignas(64) std::atomic<std::uint32_t> dataWord;  // bumped after head moves
  std::atomic<std::uint32_t> readerSleeping;
  alignas(64) std::atomic<std::uint32_t> roomWord;  // bumped after tail moves
  std::atomic<std::uint32_t> writerSleeping;
  alignas(64) std::atomic<std::uint32_t> closed;
  alignas(64) std::atomic<std::uint32_t> returned;  // lent payloads given back, mod 2^32
  std::atomic<std::uint32_t> returnWord;            // bumped after returned moves
  std::atomic<std::uint32_t> lenderSleeping;
  std::atomic<std::uint32_t> lendingRefused;
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "atomics shared between processes");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "atomics shared between processes");

Ring Ring::create(std::size_t capacity) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  if (capacity < 4096 || (capacity & (capacity - 1)) != 0) {
    throw ConfigError(
        "a shared-memory ring's capacity must be a power of two of 4 KiB or more, not " +
        std::to_string(capacity));
  }
  int fd = ::memfd_create("crown-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw Error("memfd_create failed: " + errorText());
  std::size_t bytes = kHeaderBytes + capacity;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 || ::fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    std::string why = errorText();
    ::close(fd);
    throw Error("cannot size a shared-memory ring of " + std::to_string(bytes) + " bytes: " + why);
  }
  // MAP_POPULATE (here and in attach): the pages are committed at once, so
  // a link's memory is in RSS from its start instead of creeping up while
  // the ring's head goes round the first time, and no lap takes a fault.
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (memory == MAP_FAILED) {
    std::string why = errorText();
    ::close(fd);
    throw Error("cannot map a shared-memory ring: " + why);
  }
  auto* header = new (memory) Header{};
  header->magic = kMagic;
  header->capacity = capacity;
  return Ring(fd, header, static_cast<std::byte*>(memory) + kHeaderBytes);
}

Ring Ring::attach(int fd) {
  // Sealed against shrinking, so the peer cannot pull the pages from under
  // this mapping (a SIGBUS here).
  int seals = ::fcntl(fd, F_GET_SEALS);
  struct stat info {};
  if (seals < 0 || (static_cast<unsigned>(seals) & kSeals) != kSeals || ::fstat(fd, &info) != 0 ||
      info.st_size < static_cast<off_t>(kHeaderBytes + 4096)) {
    ::close(fd);
    throw ProtocolError("a shared-memory ring's segment is not a sealed crown ring");
  }
  auto bytes = static_cast<std::size_t>(info.st_size);
  // MAP_POPULATE (here and in attach): the pages are committed at once, so
  // a link's memory is in RSS from its start instead of creeping up while
  // the ring's head goes round the first time, and no lap takes a fault.
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (memory == MAP_FAILED) {
    std::string why = errorText();
    ::close(fd);
    throw Error("cannot map a shared-memory ring: " + why);
  }
  auto* header = static_cast<Header*>(memory);
  if (header->magic != kMagic || header->capacity + kHeaderBytes != bytes) {
    ::munmap(memory, bytes);
    ::close(fd);
    throw ProtocolError("a shared-memory ring's header does not match its segment");
  }
  return Ring(fd, header, static_cast<std::byte*>(memory) + kHeaderBytes);
}

Ring::Ring(int fd, Header* header, std::byte* data) : fd_(fd), header_(header), data_(data) {}

Ring::Ring(Ring&& other) noexcept { *this = std::move(other); }

Ring& Ring::operator=(Ring&& other) noexcept {
  if (this != &other) {
    this->~Ring();
    fd_ = std::exchange(other.fd_, -1);
    header_ = std::exchange(other.header_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    spinLimit_ = other.spinLimit_;
    spin_ = other.spin_;
    sleeps_ = other.sleeps_;
    lent_ = other.lent_;
  }
  return *this;
}

Ring::~Ring() {
  if (header_ != nullptr) ::munmap(header_, kHeaderBytes + header_->capacity);
  if (fd_ >= 0) ::close(fd_);
  header_ = nullptr;
  fd_ = -1;
}

std::size_t Ring::capacity() const { return header_->capacity; }

template <class Ready>
bool Ring::await(Ready ready, std::atomic<std::uint32_t>& word,
                 std::atomic<std::uint32_t>& sleeping,
                 std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  if (ready()) {  // no clock read when the wait is over before it began
    spin_ = spinLimit_;
    return true;
  }
  const auto start = Clock::now();
  auto spinUntil = start + spin_;
  // Yielding now and then: with as many ranks as cores, the thread this
  // one waits for (the peer's, or a handler of this process) may share its core.
  for (unsigned round = 1; spin_.count() > 0; ++round) {
    if (ready()) {
      spin_ = spinLimit_;  // caught spinning: keep spinning
      return true;
    }
    relax();
    if (round % 16 == 0) {
      sched_yield();
      if (Clock::now() >= spinUntil) break;
    }
  }
  auto adapt = [&] {  // a wait the full spin would have caught: spin it next time
    spin_ = Clock::now() - start <= spinLimit_ ? spinLimit_ : spin_ / 2;
  };
  for (;;) {
    if (ready()) {
      adapt();
      return true;
    }
    if (header_->closed.load()) return false;
    auto now = Clock::now();
    if (now >= deadline) return false;
    std::uint32_t seen = word.load();
    sleeping.store(1);
    if (ready() || header_->closed.load()) {
      sleeping.store(0);
      continue;
    }
    futexWait(word, seen, std::min<std::chrono::nanoseconds>(deadline - now, kLongestSleep));
    sleeping.store(0);
    ++sleeps_;
  }
}

bool Ring::putBytes(std::span<const std::byte> bytes, std::uint64_t& head,
                    std::chrono::steady_clock::time_point deadline) {
  Header& h = *header_;
  const std::uint64_t capacity = h.capacity;
  while (!bytes.empty()) {
    std::uint64_t room = capacity - (head - h.tail.load(std::memory_order_acquire));
    if (room == 0) {
      // A record larger than the room goes through in pieces: the reader
      // must see this one to make room for the next.
      publish(head);
      if (!await([&] { return h.tail.load(std::memory_order_acquire) != head - capacity; },
                 h.roomWord, h.writerSleeping, deadline)) {
        return false;
      }
      continue;
    }
    std::size_t n = std::min<std::uint64_t>(room, bytes.size());
    std::size_t at = head & (capacity - 1);
    std::size_t first = std::min(n, capacity - at);
    std::memcpy(data_ + at, bytes.data(), first);
    std::memcpy(data_, bytes.data() + first, n - first);
    head += n;
    bytes = bytes.subspan(n);
  }
  return true;
}

void Ring::publish(std::uint64_t head) {
  Header& h = *header_;
  if (h.head.load(std::memory_order_relaxed) == head) return;
  h.head.store(head);  // seq_cst: before the word and the sleeper's flag
  h.dataWord.fetch_add(1);
  if (h.readerSleeping.load()) futexWake(h.dataWord);
}

bool Ring::takeBytes(std::byte* out, std::size_t size,
                     std::chrono::steady_clock::time_point deadline) {
  Header& h = *header_;
  const std::uint64_t capacity = h.capacity;
  std::uint64_t tail = h.tail.load(std::memory_order_relaxed);
  while (size > 0) {
    std::uint64_t head = h.head.load(std::memory_order_acquire);
    if (head - tail > capacity) return false;  // a corrupt counter: never read past the ring
    if (head == tail) {
      if (!await([&] { return h.head.load(std::memory_order_acquire) != tail; }, h.dataWord,
                 h.readerSleeping, deadline)) {
        return false;
      }
      continue;
    }
    std::size_t n = std::min<std::uint64_t>(head - tail, size);
    std::size_t at = tail & (capacity - 1);
    std::size_t first = std::min(n, capacity - at);
    std::memcpy(out, data_ + at, first);
    std::memcpy(out + first, data_, n - first);
    tail += n;
    out += n;
    size -= n;
    h.tail.store(tail);
    h.roomWord.fetch_add(1);
    if (h.writerSleeping.load()) futexWake(h.roomWord);
  }
  return true;
}

Ring::Result Ring::write(std::span<const std::span<const std::byte>> parts,
                         std::chrono::steady_clock::time_point deadline) {
  if (header_->closed.load()) return Result::kClosed;
  std::uint64_t length = 0;
  for (const auto& part : parts) length += part.size();
  // One publication per record, not one per part: each is a store and a
  // read-modify-write on lines the reader polls.
  std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  bool whole = putBytes(std::as_bytes(std::span(&length, 1)), head, deadline);
  for (const auto& part : parts) whole = whole && putBytes(part, head, deadline);
  if (whole) {
    publish(head);
    return Result::kDone;
  }
  bool closed = header_->closed.load();
  close();  // half a record must not be read as a whole one
  return closed ? Result::kClosed : Result::kTimedOut;
}

Ring::Result Ring::write(std::span<const std::byte> record,
                         std::chrono::steady_clock::time_point deadline) {
  return write(std::span(&record, 1), deadline);
}

Ring::Result Ring::read(std::vector<std::byte>& out,
                        std::chrono::steady_clock::time_point deadline) {
  return readRecord(out, deadline);
}

Ring::Result Ring::read(std::string& out, std::chrono::steady_clock::time_point deadline) {
  return readRecord(out, deadline);
}

template <class Buffer>
Ring::Result Ring::readRecord(Buffer& out, std::chrono::steady_clock::time_point deadline) {
  std::uint64_t length = 0;
  Result begun = begin(length, deadline);
  if (begun != Result::kDone) return begun;
  out.resize(length);
  return take(std::as_writable_bytes(std::span(out))) ? Result::kDone : Result::kClosed;
}

Ring::Result Ring::begin(std::uint64_t& length, std::chrono::steady_clock::time_point deadline) {
  // A record begun is read to its end, however long the writer takes: only
  // the wait for its first byte is bounded by the caller's deadline.
  Header& h = *header_;
  if (h.head.load() == h.tail.load()) {
    if (!await(
            [&] {
              return h.head.load(std::memory_order_acquire) !=
                     h.tail.load(std::memory_order_relaxed);
            },
            h.dataWord, h.readerSleeping, deadline)) {
      return h.closed.load() ? Result::kClosed : Result::kTimedOut;
    }
  }
  auto forever = std::chrono::steady_clock::time_point::max();
  if (!takeBytes(reinterpret_cast<std::byte*>(&length), sizeof length, forever))
    return Result::kClosed;
  if (length > (std::uint64_t{1} << 40)) {  // not a length a writer wrote
    close();
    return Result::kClosed;
  }
  return Result::kDone;
}

Ring::Result Ring::begin(std::uint64_t& length, std::chrono::nanoseconds patience) {
  // Only this reader moves the tail, so a ring seen holding a byte still
  // holds it in begin(): it will not wait, and needs no deadline.
  if (header_->head.load() != header_->tail.load()) {
    return begin(length, std::chrono::steady_clock::time_point::max());
  }
  return begin(length, std::chrono::steady_clock::now() + patience);
}

bool Ring::take(std::span<std::byte> out) {
  return takeBytes(out.data(), out.size(), std::chrono::steady_clock::time_point::max());
}

void Ring::close() {
  Header& h = *header_;
  h.closed.store(1);
  h.dataWord.fetch_add(1);
  h.roomWord.fetch_add(1);
  h.returnWord.fetch_add(1);
  futexWake(h.dataWord);
  futexWake(h.roomWord);
  futexWake(h.returnWord);
}

bool Ring::closed() const { return header_->closed.load() != 0; }

Ring::Result Ring::awaitReturn(std::chrono::steady_clock::time_point deadline) {
  Header& h = *header_;
  std::uint32_t lent = ++lent_;
  auto given = [&] { return h.returned.load() == lent; };
  if (await(given, h.returnWord, h.lenderSleeping, deadline) || given()) return Result::kDone;
  if (h.closed.load()) return Result::kClosed;
  close();  // the reader may yet copy: it must drop what it copies from memory reused now
  return Result::kTimedOut;
}

void Ring::giveBack(bool refused) {
  Header& h = *header_;
  if (refused) h.lendingRefused.store(1);
  h.returned.fetch_add(1);  // seq_cst: before the word and the sleeper's flag
  h.returnWord.fetch_add(1);
  if (h.lenderSleeping.load()) futexWake(h.returnWord);
}

bool Ring::lendingRefused() const { return header_->lendingRefused.load() != 0; }

namespace {

// One byte of data, and room for one descriptor: what sendFd and receiveFd exchange.
struct FdMessage {
  char byte = 'r';
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
  FdMessage() {
    header.msg_iov = &data;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

}  // namespace

void sendFd(int socket, int fd) {
  FdMessage message;
  cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  if (::sendmsg(socket, &message.header, MSG_NOSIGNAL) != 1) {
    throw Error("cannot pass a shared-memory segment: " + errorText());
  }
}

int receiveFd(int socket) {
  FdMessage message;
  if (::recvmsg(socket, &message.header, MSG_CMSG_CLOEXEC) != 1) {
    throw Error("no shared-memory segment came: the socket closed or failed");
  }
  cmsghdr* header = CMSG_FIRSTHDR(&message.header);
  if (header == nullptr || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
      header->cmsg_len != CMSG_LEN(sizeof(int))) {
    throw ProtocolError("a message that should carry a shared-memory segment carried none");
  }
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(header), sizeof fd);
  return fd;
}

}  // namespace crown::transport::shm
