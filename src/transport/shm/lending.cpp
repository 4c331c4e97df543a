#include "transport/shm/lending.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "crown/common/env.h"
#include "crown/common/error.h"
#include "crown/common/log.h"

namespace crown::transport::shm {
namespace {

// Measured with bench/shm_lending (bench/README.md): below this, copying
// through the ring costs less than the kernel's page pinning and the wait
// for the reader's return.
constexpr std::int64_t kDefaultLendFromBytes = 1 << 20;

struct Piece {
  std::uint64_t address;
  std::uint64_t bytes;
};

std::vector<Piece> piecesOf(const OutMessage& message) {
  std::vector<Piece> pieces;
  auto add = [&](const char* data, std::size_t size) {
    if (size > 0) pieces.push_back({reinterpret_cast<std::uintptr_t>(data), size});
  };
  add(message.payload.head().data(), message.payload.head().size());
  for (const auto& segment : message.payload.segments()) add(segment.data, segment.size);
  return pieces;
}

// The kernel will not let this process read the lender: another pid
// namespace (ESRCH for a pid it cannot see), ptrace policy or a missing
// capability (EPERM), a seccomp filter or an old kernel (ENOSYS).
bool refusedByKernel(int error) {
  return error == EPERM || error == ESRCH || error == ENOSYS || error == EACCES;
}

}  // namespace

std::size_t lendFromBytes() {
  static const auto bytes = static_cast<std::size_t>(
      env::integer("CROWN_SHM_LEND_BYTES", kDefaultLendFromBytes, 0, std::int64_t{1} << 40));
  return bytes;
}

bool lends(const OutMessage& message) {
  std::size_t from = lendFromBytes();
  return from > 0 && message.payload.size() >= from &&
         1 + message.payload.segments().size() <= kMaxLentPieces;
}

std::vector<std::span<const std::byte>> lentRecordParts(const OutMessage& message,
                                                        std::string& head) {
  std::vector<Piece> pieces = piecesOf(message);
  std::size_t envelopeBytes = wire::encodedSize(message.envelope);
  head.assign(4 + envelopeBytes + 4 + sizeof(Piece) * pieces.size(), '\0');
  char* at = head.data();
  auto word = static_cast<std::uint32_t>(envelopeBytes) | kLentBit;
  std::memcpy(at, &word, 4);
  wire::encodeEnvelope(message.envelope, reinterpret_cast<std::byte*>(at + 4));
  at += 4 + envelopeBytes;
  auto count = static_cast<std::uint32_t>(pieces.size());
  std::memcpy(at, &count, 4);
  std::memcpy(at + 4, pieces.data(), sizeof(Piece) * pieces.size());
  return {std::as_bytes(std::span(head))};
}

std::optional<wire::Bytes> copyLent(pid_t lender, std::span<const std::byte> descriptor,
                                    const wire::FrameLimits& limits) {
  std::uint32_t count = 0;
  if (descriptor.size() < 4) throw ProtocolError("a lent payload's descriptor is cut short");
  std::memcpy(&count, descriptor.data(), 4);
  if (count > kMaxLentPieces || descriptor.size() != 4 + sizeof(Piece) * count) {
    throw ProtocolError("a lent payload's descriptor of " + std::to_string(descriptor.size()) +
                        " bytes for " + std::to_string(count) + " pieces");
  }
  std::vector<iovec> remote(count);
  std::uint64_t total = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    Piece piece{};
    std::memcpy(&piece, descriptor.data() + 4 + sizeof(Piece) * i, sizeof piece);
    if (piece.bytes > limits.maxPayloadBytes || total + piece.bytes > limits.maxPayloadBytes) {
      throw ProtocolError(limits.refusal(total + piece.bytes));
    }
    total += piece.bytes;
    remote[i] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(piece.address)),
                 static_cast<std::size_t>(piece.bytes)};
  }
  if (lender <= 0) return std::nullopt;  // no peer this process can name
  wire::Bytes payload;
  wire::sizeForOverwrite(payload, total);
  std::size_t copied = 0;
  std::size_t first = 0;  // the first remote piece not yet copied whole
  while (copied < total) {
    iovec local{payload.data() + copied, total - copied};
    ssize_t got = ::process_vm_readv(lender, &local, 1, remote.data() + first,
                                     static_cast<unsigned long>(count - first), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && refusedByKernel(errno)) {
      log::get().info(
          "shared-memory backend: cannot read pid {}'s memory ({}): large frames "
          "from it are copied through the ring",
          lender, std::strerror(errno));
      return std::nullopt;
    }
    if (got <= 0) {
      throw ProtocolError("a lent payload names memory its writer does not have: " +
                          std::string(got < 0 ? std::strerror(errno) : "nothing was copied"));
    }
    // A short copy stops at a piece's end (the kernel never splits one):
    // go on from the next piece.
    copied += static_cast<std::size_t>(got);
    for (std::size_t skipped = static_cast<std::size_t>(got); skipped > 0; ++first) {
      if (skipped < remote[first].iov_len) {
        remote[first].iov_base = static_cast<char*>(remote[first].iov_base) + skipped;
        remote[first].iov_len -= skipped;
        break;
      }
      skipped -= remote[first].iov_len;
    }
  }
  return payload;
}

}  // namespace crown::transport::shm
