// A man in the middle for transport tests: listens on 127.0.0.1, and relays
// each connection it accepts to `target` byte for byte, both ways, with an
// optional edit of the client's bytes on their way. It knows no secret: what
// it can do is what an attacker on the path or holding a dead rank's port can.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace crown::testing {

class TcpRelay {
 public:
  /// `edit` may change each chunk read from the connecting side.
  explicit TcpRelay(std::string targetAddress, std::function<void(std::string&)> edit = {})
      : target_(std::move(targetAddress)), edit_(std::move(edit)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(listener_, 8);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    address_ = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    thread_ = std::thread([this] { run(); });
  }

  ~TcpRelay() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }

  /// "127.0.0.1:PORT", a TCP backend's address format.
  const std::string& address() const { return address_; }

 private:
  int connectTarget() const {
    auto colon = target_.rfind(':');
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(std::stoi(target_.substr(colon + 1))));
    ::inet_pton(AF_INET, target_.substr(0, colon).c_str(), &address.sin_addr);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  // One thread polls every connection pair, so the relay needs no locks.
  void run() {
    struct Pair {
      int client;
      int server;
    };
    std::vector<Pair> pairs;
    while (!stop_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (auto& p : pairs) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.server, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      std::size_t polled = pairs.size();
      if (fds[0].revents & POLLIN) {
        int client = ::accept(listener_, nullptr, nullptr);
        int server = connectTarget();
        if (server < 0) {
          ::close(client);
        } else {
          pairs.push_back({client, server});
        }
      }
      for (std::size_t i = 0; i < polled; ++i) {
        for (int side = 0; side < 2; ++side) {
          if (!(fds[1 + 2 * i + side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          int from = side == 0 ? pairs[i].client : pairs[i].server;
          int to = side == 0 ? pairs[i].server : pairs[i].client;
          std::string chunk(1 << 16, '\0');
          ssize_t n = ::read(from, chunk.data(), chunk.size());
          if (n <= 0) {
            ::shutdown(to, SHUT_WR);
            continue;
          }
          chunk.resize(static_cast<std::size_t>(n));
          if (side == 0 && edit_) edit_(chunk);
          (void)::write(to, chunk.data(), chunk.size());
        }
      }
    }
    for (auto& p : pairs) {
      ::close(p.client);
      ::close(p.server);
    }
  }

  std::string target_;
  std::function<void(std::string&)> edit_;
  int listener_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace crown::testing
