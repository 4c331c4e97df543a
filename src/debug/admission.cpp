// The debug server's admission (admission.h): nonblocking handshakes on the
// accepting thread, bounded per pool and per peer address.
#include "admission.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <vector>

#include "crown/common/log.h"

namespace crown::debug {
namespace {

constexpr std::size_t kMaxLineBytes = 4096;

template <std::size_t N>
bool fromHex(const std::string& text, std::array<std::uint8_t, N>& out) {
  if (text.size() != N * 2) return false;
  for (std::size_t i = 0; i < N; ++i) {
    unsigned value = 0;
    for (char c : text.substr(2 * i, 2)) {
      value <<= 4;
      if (c >= '0' && c <= '9') value |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') value |= static_cast<unsigned>(c - 'a' + 10);
      else return false;
    }
    out[i] = static_cast<std::uint8_t>(value);
  }
  return true;
}

// One short line to a nonblocking socket: it fits a fresh socket's buffer,
// so a client whose buffer is full is not reading and is dropped.
bool sendLine(int fd, const std::string& text) {
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
         static_cast<ssize_t>(text.size());
}

void refuse(int fd, const std::string& why) {
  sendLine(fd, why + "\n");
  ::close(fd);
}

std::string peerAddress(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr, text,
                sizeof text);
  }
  return text;
}

void setBlocking(int fd, bool blocking) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

}  // namespace

std::string hexOf(std::span<const std::uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

namespace {
transport::Mac proofMac(const transport::Secret& token, const std::string& hello,
                        const std::string& role, const transport::Nonce& serverNonce,
                        const transport::Nonce& clientNonce) {
  std::vector<std::uint8_t> data(hello.begin(), hello.end());
  data.push_back(' ');
  data.insert(data.end(), role.begin(), role.end());
  data.insert(data.end(), serverNonce.begin(), serverNonce.end());
  data.insert(data.end(), clientNonce.begin(), clientNonce.end());
  return transport::hmacSha256(token, data);
}
}  // namespace

std::string debugProof(const transport::Secret& token, const std::string& hello,
                       const std::string& role, const transport::Nonce& serverNonce,
                       const transport::Nonce& clientNonce) {
  return hexOf(proofMac(token, hello, role, serverNonce, clientNonce));
}

Admission::Admission(transport::Secret token, std::string hello)
    : token_(token), hello_(std::move(hello)) {}

Admission::~Admission() {
  for (const Pending& client : pending_) ::close(client.fd);
}

std::size_t Admission::remoteFrom(const std::string& address) const {
  return static_cast<std::size_t>(std::count_if(
      pending_.begin(), pending_.end(),
      [&](const Pending& p) { return !p.local && p.address == address; }));
}

void Admission::add(int fd, bool local) {
  Pending client;
  client.fd = fd;
  client.local = local;
  if (local) {
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::geteuid()) {
      log::get().warn("debug server: refused a connection from uid {}", peer.uid);
      refuse(fd, "refused: only the job's own user may connect");
      return;
    }
  } else {
    client.address = peerAddress(fd);
  }
  std::size_t inPool = static_cast<std::size_t>(std::count_if(
      pending_.begin(), pending_.end(), [&](const Pending& p) { return p.local == local; }));
  if (inPool >= (local ? kMaxLocal : kMaxRemote)) {
    refuse(fd, "error: the debug server is busy with other connections: try again");
    return;
  }
  if (!local && remoteFrom(client.address) >= kMaxRemotePerAddress) {
    refuse(fd, "error: the debug server is busy with other connections from " + client.address +
                   ": try again");
    return;
  }
  setBlocking(fd, false);
  client.serverNonce = transport::randomNonce();
  client.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kHandshakeSeconds);
  if (!sendLine(fd, hello_ + " 2 " + hexOf(client.serverNonce) + "\n")) {
    ::close(fd);
    return;
  }
  pending_.push_back(std::move(client));
}

void Admission::appendPollEntries(std::vector<pollfd>& fds) const {
  for (const Pending& client : pending_) fds.push_back({client.fd, POLLIN, 0});
}

int Admission::pollTimeoutMs() const {
  if (pending_.empty()) return -1;
  auto first = std::min_element(pending_.begin(), pending_.end(),
                                [](const Pending& a, const Pending& b) {
                                  return a.deadline < b.deadline;
                                })->deadline;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(first - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

bool Admission::onLine(Pending& client, const std::string& line) {
  if (client.stage == Stage::kCommand) return true;
  auto space = line.find(' ');
  transport::Nonce clientNonce{};
  transport::Mac proof{};
  if (space == std::string::npos || !fromHex(line.substr(0, space), clientNonce) ||
      !fromHex(line.substr(space + 1), proof) ||
      !transport::macEqual(proof,
                           proofMac(token_, hello_, "client", client.serverNonce, clientNonce))) {
    refuse(client.fd, "refused: the proof does not match the job's token");
    return false;
  }
  if (!sendLine(client.fd,
                debugProof(token_, hello_, "server", client.serverNonce, clientNonce) + "\n")) {
    ::close(client.fd);
    return false;
  }
  client.stage = Stage::kCommand;
  return true;
}

std::vector<AdmittedClient> Admission::progress(std::span<const pollfd> entries) {
  std::vector<AdmittedClient> admitted;
  auto now = std::chrono::steady_clock::now();
  std::vector<Pending> still;
  // entries[i] is pending_[i]'s (appendPollEntries); later additions follow.
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    Pending& client = pending_[i];
    bool alive = true;
    if (i < entries.size() && entries[i].revents != 0) {
      char buffer[512];
      ssize_t n = ::recv(client.fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        client.received.append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        alive = false;  // gone
        ::close(client.fd);
      }
    }
    for (auto newline = client.received.find('\n'); alive && newline != std::string::npos;
         newline = client.received.find('\n')) {
      std::string line = client.received.substr(0, newline);
      client.received.erase(0, newline + 1);
      Stage before = client.stage;
      alive = onLine(client, line);
      if (alive && before == Stage::kCommand) {
        setBlocking(client.fd, true);
        admitted.push_back({client.fd, client.local, line});
        alive = false;  // handed over, not closed
        break;
      }
    }
    if (alive && (client.received.size() > kMaxLineBytes || now > client.deadline)) {
      ::close(client.fd);  // silent, too slow or too long: its window is over
      alive = false;
    }
    if (alive) still.push_back(std::move(client));
  }
  pending_ = std::move(still);
  return admitted;
}

}  // namespace crown::debug
