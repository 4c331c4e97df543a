// The debug server (crown/debug/server.h): one thread accepts and runs every
// client's handshake without blocking (admission.h), a few answer the
// clients that proved the token, so that a live `crown status` goes on while
// `crown stacks --native` waits for eu-stack, and nobody who has not proved
// the token holds an answerer. One answerer serves local (Unix socket)
// clients alone, and the others serve them first. Each answer is bounded by
// a send timeout. What each command answers is server_commands.cpp's.
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
#include "admission.h"
#include "server_commands.h"

namespace crown::debug {
namespace {

constexpr int kClientTimeoutSeconds = 5;
constexpr int kAnswerers = 4;            // clients answered at once; one answers local ones only
constexpr std::size_t kMaxWaiting = 64;  // admitted, not yet answered, per pool; more are refused
constexpr int kMaxAcceptsPerWake = 64;

void sendAll(int fd, const std::string& text) {
  std::size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client left: nothing more to tell it
    sent += static_cast<std::size_t>(n);
  }
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
      ::listen(fd, 64) != 0 || ::fcntl(fd, F_SETFL, O_NONBLOCK) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
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
  std::thread thread;  // accepts, and runs every handshake (admission.h)
  std::vector<std::thread> answerers;
  std::mutex mutex;
  std::condition_variable ready;
  // Admitted clients, by pool: a local one never waits behind a remote one.
  std::deque<AdmittedClient> waitingLocal;   // under mutex
  std::deque<AdmittedClient> waitingRemote;  // under mutex
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
    for (auto* queue : {&waitingLocal, &waitingRemote}) {
      for (const AdmittedClient& client : *queue) ::close(client.fd);
    }
    for (int fd : {listenFd, tcpFd, wake[0], wake[1]}) {
      if (fd >= 0) ::close(fd);
    }
    for (const std::string* path : {&socketPath, &tokenPath, &addressPath}) {
      if (!path->empty()) ::unlink(path->c_str());
    }
  }

  void serve() {
    Admission admission(token, "crown-debug");
    std::vector<pollfd> fds;
    for (;;) {
      // A TCP port that is not set is -1, which poll skips.
      fds.assign({{listenFd, POLLIN, 0}, {tcpFd, POLLIN, 0}, {wake[0], POLLIN, 0}});
      admission.appendPollEntries(fds);
      if (::poll(fds.data(), fds.size(), admission.pollTimeoutMs()) < 0) continue;
      if (fds[2].revents != 0) return;
      for (AdmittedClient& client : admission.progress(std::span(fds).subspan(3))) {
        enqueue(std::move(client));
      }
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & POLLIN) == 0) continue;
        for (int n = 0; n < kMaxAcceptsPerWake; ++n) {  // the listeners are nonblocking
          int client = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
          if (client < 0) break;
          admission.add(client, /*local=*/i == 0);
        }
      }
    }
  }

  void enqueue(AdmittedClient client) {
    std::unique_lock lock(mutex);
    auto& queue = client.local ? waitingLocal : waitingRemote;
    if (queue.size() >= kMaxWaiting) {
      lock.unlock();
      timeval bound{kClientTimeoutSeconds, 0};
      ::setsockopt(client.fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
      sendAll(client.fd, "error: the debug server is busy: try again\n");
      ::close(client.fd);
      return;
    }
    queue.push_back(std::move(client));
    lock.unlock();
    ready.notify_all();  // the local-only answerer may be the one to wake
  }

  void answerWaiting(bool localOnly) {
    for (;;) {
      std::unique_lock lock(mutex);
      ready.wait(lock, [&] {
        return stopping || !waitingLocal.empty() || (!localOnly && !waitingRemote.empty());
      });
      if (stopping) return;
      auto& queue = waitingLocal.empty() ? waitingRemote : waitingLocal;
      AdmittedClient client = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      timeval bound{kClientTimeoutSeconds, 0};
      ::setsockopt(client.fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
      try {
        sendAll(client.fd, answerCommand(proc, client.command));
      } catch (const std::exception& e) {
        sendAll(client.fd, std::string("error: ") + e.what() + "\n");
      }
      ::close(client.fd);
    }
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
  writePrivate(impl->tokenPath, hexOf(impl->token) + "\n");
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
      ::chmod(impl->socketPath.c_str(), 0600) != 0 || ::listen(impl->listenFd, 64) != 0 ||
      ::fcntl(impl->listenFd, F_SETFL, O_NONBLOCK) != 0 ||
      ::pipe2(impl->wake, O_CLOEXEC) != 0) {
    throw Error("cannot listen at " + impl->socketPath);
  }
  Impl* raw = impl.get();
  for (int i = 0; i < kAnswerers; ++i) {
    impl->answerers.emplace_back([raw, i] { raw->answerWaiting(/*localOnly=*/i == 0); });
  }
  impl->thread = std::thread([raw] { raw->serve(); });
  log::get().debug("debug server at {}", impl->socketPath);
  return std::unique_ptr<DebugServer>(new DebugServer(std::move(impl)));
}

DebugServer::DebugServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DebugServer::~DebugServer() = default;
const std::string& DebugServer::socketPath() const { return impl_->socketPath; }

}  // namespace crown::debug
