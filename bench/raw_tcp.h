// The raw TCP anchor of the bench programs: blocking POSIX sockets with no
// framing library, no serialization and no threads in the way, so it shows
// what the kernel's TCP path alone costs between the same two processes.
//
// A server lives inside an actor on the remote rank: its handler listens and
// returns the endpoint, and a thread of its own serves the one connection
// (the handler must return for the controller to learn where to connect).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include <crown/crown.h>

namespace crown::bench {

/// Where a raw TCP server listens; travels back as a handler's reply.
struct TcpEndpoint {
  std::string host;
  std::uint16_t port = 0;
  template <class Archive>
  void serialize(Archive& archive, unsigned) {
    archive& host& port;
  }
};

[[noreturn]] inline void throwErrno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

/// The address this rank's crown fabric listens on, so that the anchor takes
/// the same network path as crown's own links (loopback on one host, the
/// chosen interface across hosts).
inline std::string fabricHost() {
  for (const auto& [backend, address] : Runtime::current().addresses())
    if (backend == "tcp") return address.substr(0, address.rfind(':'));  // "ip:port"
  throw std::runtime_error("this rank's fabric has no TCP backend");
}

inline void setNoDelay(int fd) {
  int on = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) != 0) throwErrno("TCP_NODELAY");
}

inline sockaddr_in ipv4(const std::string& host, std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    throw std::runtime_error("not an IPv4 address: " + host);
  }
  return address;
}

inline int connectTo(const TcpEndpoint& endpoint) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throwErrno("socket");
  sockaddr_in address = ipv4(endpoint.host, endpoint.port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    throwErrno("connect to " + endpoint.host + ":" + std::to_string(endpoint.port));
  }
  setNoDelay(fd);
  return fd;
}

inline void writeAll(int fd, const void* data, std::size_t size) {
  auto* at = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, at, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throwErrno("send");
    }
    at += n;
    size -= static_cast<std::size_t>(n);
  }
}

/// Reads exactly `size` bytes; false when the peer closed first.
inline bool readAll(int fd, void* data, std::size_t size) {
  auto* at = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, at, size, 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      throwErrno("recv");
    }
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

/// Serves one connection on a thread of its own; joined on destruction.
class OneShotServer {
 public:
  OneShotServer() = default;
  OneShotServer(const OneShotServer&) = delete;
  OneShotServer& operator=(const OneShotServer&) = delete;
  ~OneShotServer() {
    if (thread_.joinable()) thread_.join();
  }

  /// Listens on `host` (the kernel picks the port) and runs `serve(fd)` on
  /// the first connection. A controller that never connects costs at most
  /// `acceptTimeoutMs`, so the rank can still shut down (SHT-1).
  TcpEndpoint start(const std::string& host, std::function<void(int)> serve,
                    int acceptTimeoutMs = 30000) {
    if (thread_.joinable()) thread_.join();  // the previous connection is done by now
    int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) throwErrno("socket");
    sockaddr_in address = ipv4(host, 0);
    socklen_t length = sizeof address;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ::close(listener);
      throwErrno("listen on " + host);
    }
    thread_ = std::thread([listener, acceptTimeoutMs, serve = std::move(serve)] {
      pollfd ready{listener, POLLIN, 0};
      int fd = ::poll(&ready, 1, acceptTimeoutMs) == 1 ? ::accept(listener, nullptr, nullptr) : -1;
      ::close(listener);
      if (fd < 0) return;
      try {
        setNoDelay(fd);
        serve(fd);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "raw tcp server: %s\n", e.what());
      }
      ::close(fd);
    });
    return {host, ntohs(address.sin_port)};
  }

 private:
  std::thread thread_;
};

}  // namespace crown::bench
