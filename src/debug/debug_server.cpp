// The debug server (crown/debug/server.h): one thread accepts, a few answer,
// so that a live `crown status` goes on while `crown stacks --native` waits
// for eu-stack; each client is bounded by socket timeouts, so one that
// stalls holds its answerer for seconds at most. What each command answers
// is server_commands.cpp's.
#include "crown/debug/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/transport/auth.h"
#include "server_commands.h"

namespace crown::debug {
namespace {

constexpr int kClientTimeoutSeconds = 5;
constexpr int kAnswerers = 4;            // clients answered at once
constexpr std::size_t kMaxWaiting = 64;  // accepted, not yet answered; more are refused
constexpr std::size_t kMaxRequestBytes = 4096;

template <std::size_t N>
std::string toHex(const std::array<std::uint8_t, N>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

bool fromHex(const std::string& text, transport::Mac& out) {
  if (text.size() != out.size() * 2) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
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

void sendAll(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client left: nothing more to tell it
    sent += static_cast<std::size_t>(n);
  }
}

std::string readLine(int fd) {
  std::string line;
  char c = 0;
  while (line.size() < kMaxRequestBytes && ::recv(fd, &c, 1, 0) == 1) {
    if (c == '\n') return line;
    line += c;
  }
  return "";  // closed, timed out or too long
}

// CROWN_DEBUG_TCP=[HOST][:PORT] (as tcp_setting() in python/crown/_jobs.py):
// the address to bind, the port (0: a free one), and the host a client on
// another node is told to reach; nullopt when unset.
struct TcpSetting {
  std::string bind;
  int port = 0;
  std::string advertised;
};

std::string nodeName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::optional<TcpSetting> tcpSetting() {
  auto text = env::get("CROWN_DEBUG_TCP");
  if (!text) return std::nullopt;
  TcpSetting out;
  std::string port = "0";
  auto colon = text->rfind(':');
  out.bind = colon == std::string::npos ? *text : text->substr(0, colon);
  if (colon != std::string::npos) port = text->substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535) {
    throw ConfigError("CROWN_DEBUG_TCP=" + *text + ": expected [HOST][:PORT], PORT from 0 to 65535");
  }
  out.port = std::stoi(port);
  if (out.bind.empty() || out.bind == "0.0.0.0") {
    out.bind = "0.0.0.0";
    out.advertised = nodeName();
  } else {
    out.advertised = out.bind;
  }
  return out;
}

// A listening TCP socket on `setting` (IPv4: the fabric's own addresses are
// too); returns the port it took.
int listenTcp(const TcpSetting& setting, int& fd) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(setting.port));
  if (::inet_pton(AF_INET, setting.bind.c_str(), &address.sin_addr) != 1) {
    throw ConfigError("CROWN_DEBUG_TCP: '" + setting.bind + "' is not an IPv4 address");
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  socklen_t size = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 8) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    throw Error("cannot listen on TCP " + setting.bind + ":" + std::to_string(setting.port) +
                " (CROWN_DEBUG_TCP): " + std::strerror(errno));
  }
  return ntohs(address.sin_port);
}

void writePrivate(const std::string& path, const std::string& text) {
  ::unlink(path.c_str());  // a pid reused after a job that left it behind
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot write " + path);
  bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) throw Error("cannot write " + path);
}

}  // namespace

std::string debugDirectory() {
  std::string dir;
  if (const char* set = std::getenv("CROWN_DEBUG_DIR"); set && *set) {
    dir = set;
  } else if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    dir = std::string(runtime) + "/crown";
  } else {
    dir = "/tmp/crown-" + std::to_string(::geteuid());
  }
  ::mkdir(dir.c_str(), 0700);  // EEXIST is checked below like any directory
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw Error("the debug directory " + dir + " is not a directory (CROWN_DEBUG_DIR)");
  }
  if (info.st_uid != ::geteuid() || (info.st_mode & 077) != 0) {
    throw Error("the debug directory " + dir +
                " belongs to another user or others may enter it (it must be 0700 and "
                "this user's): the debug server would not be private");
  }
  return dir;
}

struct DebugServer::Impl {
  Proc& proc;
  std::string socketPath;
  std::string tokenPath;
  transport::Secret token{};
  int listenFd = -1;
  int tcpFd = -1;           // CROWN_DEBUG_TCP: for clients on other nodes
  std::string addressPath;  // job-PID.tcp: where tcpFd is reached
  int wake[2] = {-1, -1};
  std::thread thread;  // accepts
  std::vector<std::thread> answerers;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::pair<int, bool>> waiting;  // accepted clients, each with whether it is local
  bool stopping = false;                     // under mutex

  explicit Impl(Proc& owner) : proc(owner) {}

  ~Impl() {
    if (wake[1] >= 0) {
      char byte = 0;
      [[maybe_unused]] ssize_t n = ::write(wake[1], &byte, 1);
    }
    if (thread.joinable()) thread.join();
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    ready.notify_all();
    for (std::thread& t : answerers) t.join();
    for (const auto& [client, local] : waiting) ::close(client);
    for (int fd : {listenFd, tcpFd, wake[0], wake[1]}) {
      if (fd >= 0) ::close(fd);
    }
    for (const std::string* path : {&socketPath, &tokenPath, &addressPath}) {
      if (!path->empty()) ::unlink(path->c_str());
    }
  }

  void serve() {
    for (;;) {
      // A TCP port that is not set is -1, which poll skips.
      pollfd fds[3] = {{listenFd, POLLIN, 0}, {tcpFd, POLLIN, 0}, {wake[0], POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) continue;
      if (fds[2].revents != 0) return;
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & POLLIN) == 0) continue;
        int client = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) continue;
        std::unique_lock lock(mutex);
        if (waiting.size() >= kMaxWaiting) {
          lock.unlock();
          timeval bound{kClientTimeoutSeconds, 0};
          ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
          sendAll(client, "error: the debug server is busy: try again\n");
          ::close(client);
          continue;
        }
        waiting.emplace_back(client, /*local=*/i == 0);
        lock.unlock();
        ready.notify_one();
      }
    }
  }

  void answerWaiting() {
    for (;;) {
      std::unique_lock lock(mutex);
      ready.wait(lock, [this] { return stopping || !waiting.empty(); });
      if (stopping) return;
      auto [client, local] = waiting.front();
      waiting.pop_front();
      lock.unlock();
      try {
        answer(client, local);
      } catch (const std::exception& e) {
        sendAll(client, std::string("error: ") + e.what() + "\n");
      }
      ::close(client);
    }
  }

  // A local client must be this user (SO_PEERCRED); over TCP the token's
  // proof alone says so, since only this user can read the token.
  void answer(int client, bool local) {
    timeval bound{kClientTimeoutSeconds, 0};
    ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
    if (local) {
      ucred peer{};
      socklen_t size = sizeof peer;
      if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
          peer.uid != ::geteuid()) {
        sendAll(client, "refused: only the job's own user may connect\n");
        log::get().warn("debug server: refused a connection from uid {}", peer.uid);
        return;
      }
    }
    transport::Nonce nonce = transport::randomNonce();
    sendAll(client, "crown-debug 1 " + toHex(nonce) + "\n");
    std::string line = readLine(client);
    auto space = line.find(' ');
    transport::Mac proof{};
    transport::Mac expected = transport::hmacSha256(token, nonce);
    if (space == std::string::npos || !fromHex(line.substr(0, space), proof) ||
        !transport::macEqual(proof, expected)) {
      sendAll(client, "refused: the proof does not match the job's token\n");
      return;
    }
    sendAll(client, answerCommand(proc, line.substr(space + 1)));
  }
};

std::unique_ptr<DebugServer> DebugServer::start(Proc& proc) {
  auto impl = std::make_unique<Impl>(proc);
  std::string dir = debugDirectory();
  std::string base = dir + "/job-" + std::to_string(::getpid());
  impl->socketPath = base + ".sock";
  sockaddr_un address{};
  if (impl->socketPath.size() >= sizeof address.sun_path) {
    throw Error("the debug socket's path " + impl->socketPath + " is too long for a Unix socket");
  }
  impl->token = transport::randomSecret();
  impl->tokenPath = base + ".token";
  writePrivate(impl->tokenPath, toHex(impl->token) + "\n");
  if (auto tcp = tcpSetting()) {
    int port = listenTcp(*tcp, impl->tcpFd);
    impl->addressPath = base + ".tcp";
    writePrivate(impl->addressPath,
                 tcp->advertised + " " + std::to_string(port) + " " + nodeName() + "\n");
    log::get().info("debug server on TCP {}:{}", tcp->advertised, port);
  }

  impl->listenFd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", impl->socketPath.c_str());
  ::unlink(impl->socketPath.c_str());
  if (impl->listenFd < 0 ||
      ::bind(impl->listenFd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::chmod(impl->socketPath.c_str(), 0600) != 0 || ::listen(impl->listenFd, 8) != 0 ||
      ::pipe2(impl->wake, O_CLOEXEC) != 0) {
    throw Error("cannot listen at " + impl->socketPath);
  }
  Impl* raw = impl.get();
  for (int i = 0; i < kAnswerers; ++i) impl->answerers.emplace_back([raw] { raw->answerWaiting(); });
  impl->thread = std::thread([raw] { raw->serve(); });
  log::get().debug("debug server at {}", impl->socketPath);
  return std::unique_ptr<DebugServer>(new DebugServer(std::move(impl)));
}

DebugServer::DebugServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DebugServer::~DebugServer() = default;
const std::string& DebugServer::socketPath() const { return impl_->socketPath; }

}  // namespace crown::debug
