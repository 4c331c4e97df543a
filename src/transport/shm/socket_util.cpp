#include "transport/shm/socket_util.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace crown::transport::shm {

sockaddr_un abstractAddress(const std::string& name, socklen_t& size) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::size_t length = std::min(name.size(), sizeof address.sun_path - 2);
  std::memcpy(address.sun_path + 1, name.data(), length);
  size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + length);
  return address;
}

pid_t peerProcess(int fd) {
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) return 0;
  return credentials.pid;
}

void setTimeouts(int fd, std::chrono::milliseconds bound) {
  timeval t{static_cast<time_t>(bound.count() / 1000),
            static_cast<suseconds_t>(bound.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
}

bool sendAll(int fd, const void* data, std::size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, at, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool readAll(int fd, void* data, std::size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, at, size, 0);
    if (n <= 0) return false;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

void sendHeartbeat(int fd) {
  char beat = 0;
  [[maybe_unused]] ssize_t n = ::send(fd, &beat, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void sendRefusal(int fd, const std::string& why) {
  std::string text = why.substr(0, 512);
  std::string notice(3, '\1');
  auto length = static_cast<std::uint16_t>(text.size());
  std::memcpy(notice.data() + 1, &length, 2);
  sendAll(fd, (notice + text).data(), notice.size() + text.size());
}

SocketNews readNews(int fd) {
  SocketNews news;
  pollfd one{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&one, 1, 0) <= 0) return news;
  if ((one.revents & POLLIN) != 0) {
    std::array<char, 1024> bytes{};
    ssize_t n = 0;
    while ((n = ::recv(fd, bytes.data(), bytes.size(), MSG_DONTWAIT)) > 0) {
      for (ssize_t at = 0; at < n; ++at) {
        if (bytes[at] == 0) {
          news.heard = true;
          continue;
        }
        // A refusal: its one send() is read here whole, or its tail follows
        // at once; the link ends after it, so nothing else is in the stream.
        std::string rest(bytes.data() + at + 1, static_cast<std::size_t>(n - at - 1));
        if (rest.size() < 2) {
          rest.resize(2);
          readAll(fd, rest.data() + (n - at - 1), 2 - static_cast<std::size_t>(n - at - 1));
        }
        std::uint16_t length = 0;
        std::memcpy(&length, rest.data(), 2);
        std::string text = rest.substr(2, length);
        if (text.size() < length) {
          std::size_t have = text.size();
          text.resize(length);
          if (!readAll(fd, text.data() + have, length - have)) text.resize(have);
        }
        news.refusal = std::move(text);
        news.hungUp = true;
        return news;
      }
    }
    if (n == 0) news.hungUp = true;  // the peer's end closed after its last beat
  }
  if ((one.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) news.hungUp = true;
  return news;
}

}  // namespace crown::transport::shm
