// A shared-memory ring (issue 14, the same-host fast path): one writer, one
// reader, in a memfd segment that the two processes of a link map. Records
// are a 64-bit length and that many bytes, of any size: one larger than the
// ring goes through in pieces as the reader takes them. A side that waits
// spins briefly (yielding its core now and then), then sleeps on a futex in
// the segment, so an idle link costs no CPU; the spin adapts (the whole
// limit after a wait that it caught or would have caught, half as long
// after each longer one), and is 0 when spinning is off (more ranks than
// cores, shm_backend.cpp).
//
// Its segments travel over an authenticated Unix socket with SCM_RIGHTS
// (sendFd/receiveFd), so SEC-1 holds for what may write into them: the
// shared-memory backend (shm_backend.h) is built on it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace crown::transport::shm {

class Ring {
 public:
  /// A new segment with `capacity` bytes of data (a power of two, 4 KiB at
  /// least); throws crown::Error when the kernel refuses.
  static Ring create(std::size_t capacity);
  /// The other end of a segment that create() made (its fd(), received
  /// over a Unix socket); throws crown::Error when `fd` is not one.
  static Ring attach(int fd);

  Ring(Ring&& other) noexcept;
  Ring& operator=(Ring&& other) noexcept;
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  ~Ring();

  /// The segment's descriptor, to pass to the peer.
  int fd() const { return fd_; }
  std::size_t capacity() const;

  enum class Result { kDone, kTimedOut, kClosed };

  /// Appends one record, the concatenation of `parts`; waits for room until
  /// `deadline`. A record cut by a timeout or close leaves the ring closed
  /// (a reader must never see half of one). Writer side only.
  Result write(std::span<const std::span<const std::byte>> parts,
               std::chrono::steady_clock::time_point deadline);
  Result write(std::span<const std::byte> record, std::chrono::steady_clock::time_point deadline);
  /// Takes the next record into `out` (replacing it); waits until `deadline`.
  /// kClosed once the ring was closed and every whole record was read.
  /// Reader side only.
  Result read(std::vector<std::byte>& out, std::chrono::steady_clock::time_point deadline);
  Result read(std::string& out, std::chrono::steady_clock::time_point deadline);
  /// A record read in pieces, into buffers the reader picks once it knows
  /// what the record holds: waits until `deadline` for the next record and
  /// gives its length; the reader then takes exactly that many bytes with
  /// take() before it begins another. Reader side only.
  Result begin(std::uint64_t& length, std::chrono::steady_clock::time_point deadline);
  /// begin() waiting at most `patience` from now; the clock is read only
  /// when the ring is empty, so a reader kept busy never reads it.
  Result begin(std::uint64_t& length, std::chrono::nanoseconds patience);
  /// The next `out.size()` bytes of the record begun, however long the
  /// writer takes; false once the ring closed first.
  bool take(std::span<std::byte> out);
  /// Either side: no more records; wakes whoever waits on the other.
  void close();
  bool closed() const;

  /// Lending (lending.h): a record may name payload bytes in the writer's
  /// memory, which the reader copies out itself. The writer, after each
  /// such record, waits until the reader is done with that memory; kDone
  /// then, else kTimedOut (the ring is then closed, so the reader drops
  /// what it copied: the memory may be reused) or kClosed. Writer side only.
  Result awaitReturn(std::chrono::steady_clock::time_point deadline);
  /// The reader is done with the memory lent last: copied, or `refused`
  /// (it cannot read the writer's memory, so none will be lent again on
  /// this ring). Reader side only.
  void giveBack(bool refused);
  /// Whether the reader refused lending.
  bool lendingRefused() const;

  /// The most a wait spins before it sleeps (0: never spins); adapted
  /// below this bound.
  void setSpinLimit(std::chrono::nanoseconds limit) { spin_ = spinLimit_ = limit; }
  /// How many waits of this end went to sleep (for the tests of idle cost).
  std::uint64_t sleeps() const { return sleeps_; }

 private:
  struct Header;
  Ring(int fd, Header* header, std::byte* data);
  // Waits until `ready()` or the deadline; the futex word is `word`.
  template <class Ready>
  bool await(Ready ready, std::atomic<std::uint32_t>& word, std::atomic<std::uint32_t>& sleeping,
             std::chrono::steady_clock::time_point deadline);
  // Copies `bytes` in at `head`, the writer's cursor, and moves it on;
  // what is copied is published only where the room runs out (publish).
  bool putBytes(std::span<const std::byte> bytes, std::uint64_t& head,
                std::chrono::steady_clock::time_point deadline);
  // Hands the reader everything up to `head`, waking it if it sleeps.
  void publish(std::uint64_t head);
  bool takeBytes(std::byte* out, std::size_t size, std::chrono::steady_clock::time_point deadline);
  template <class Buffer>
  Result readRecord(Buffer& out, std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  Header* header_ = nullptr;
  std::byte* data_ = nullptr;
  std::chrono::nanoseconds spinLimit_{std::chrono::microseconds(20)};
  std::chrono::nanoseconds spin_{std::chrono::microseconds(5)};  // adapted
  std::uint64_t sleeps_ = 0;
  std::uint32_t lent_ = 0;  // records with lent payloads written (the writer's end)
};

/// Passes `fd` over the connected Unix socket `socket` (SCM_RIGHTS), with
/// one byte of data; throws crown::Error when the send fails.
void sendFd(int socket, int fd);
/// Receives a descriptor sent with sendFd; throws crown::Error when the
/// socket closed or the message carried none.
int receiveFd(int socket);

}  // namespace crown::transport::shm
