// The debug server (crown/debug/server.h): one thread, one client at a time,
// each bounded by socket timeouts so that a client that stalls cannot keep
// the next one out for long.
#include "crown/debug/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <span>
#include <thread>

#include <nlohmann/json.hpp>

#include "crown/common/env.h"
#include "crown/common/log.h"
#include "crown/debug/pdb.h"
#include "crown/debug/stacks.h"
#include "crown/debug/status.h"
#include "crown/transport/auth.h"

namespace crown::debug {
namespace {

constexpr int kClientTimeoutSeconds = 5;
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

std::string encodeStacks(const std::vector<RankStacks>& all) {
  std::string out;
  for (const auto& one : all) {
    out += "rank " + std::to_string(one.rank) + " pid " + std::to_string(one.pid) +
           " host-bytes " + std::to_string(one.host.size()) + " python-bytes " +
           std::to_string(one.python.size()) + " native-bytes " +
           std::to_string(one.native.size()) + " error-bytes " +
           std::to_string(one.error.size()) + "\n";
    out += one.host + one.python + one.native + one.error;
  }
  return out + "end\n";
}

// " heard MS": how long ago the controller last read bytes from rank `r`;
// a live link carries a heartbeat at least every CROWN_HEARTBEAT_INTERVAL_MS,
// so a large value means a quiet, or dying, link. Empty for the controller
// itself and for a rank it has no live link to.
std::string heardField(const Proc& proc, Rank r) {
  auto heard = proc.lastHeard(r);
  if (!heard) return "";
  auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - *heard);
  return " heard " + std::to_string(std::max<std::int64_t>(ago.count(), 0));
}

std::string encodeStatus(Proc& proc) {
  std::vector<Rank> live;
  std::string out;
  std::set<Rank> stopped;  // at a pdb prompt
  for (const PdbSession& session : pdbSessions(proc)) {
    if (session.waiting) stopped.insert(session.rank);
  }
  for (Rank r = 0; r < proc.size(); ++r) {
    if (proc.alive(r)) {
      live.push_back(r);
    } else if (proc.joined(r)) {
      out += "rank " + std::to_string(r) + " state lost host " + proc.host(r) + heardField(proc, r) +
             "\n";
    }
  }
  for (const auto& one : collectStatus(proc, live, std::chrono::milliseconds(2000))) {
    std::string state = !one.error.empty()        ? "silent"
                        : stopped.count(one.rank) ? "stopped"
                                                  : "alive";
    // After the answers came (up to 2 s): how fresh each link is now.
    out += "rank " + std::to_string(one.rank) + " state " + state + " host " + one.host +
           heardField(proc, one.rank);
    if (one.error.empty()) {
      out += " pid " + std::to_string(one.pid) + " rss " + std::to_string(one.rssBytes) +
             " actors " + std::to_string(one.actors) + " queued " + std::to_string(one.queued) +
             " inflight " + std::to_string(one.requestsInFlight) + " handled " +
             std::to_string(one.handled);
    } else {
      out += " error " + one.error;  // the rest of the line
    }
    out += "\n";
  }
  return out + "end\n";
}

std::string jsonLine(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// "pdb list", "pdb read RANK SESSION", "pdb send RANK SESSION LINE": the
// remote pdb sessions (pdb.h), answered as one JSON document and a newline.
std::string answerPdb(Proc& proc, const std::string& args) {
  std::istringstream in(args);
  std::string verb;
  in >> verb;
  if (verb == "list") {
    nlohmann::json sessions = nlohmann::json::array();
    for (const PdbSession& s : pdbSessions(proc)) {
      sessions.push_back({{"rank", s.rank}, {"session", s.session}, {"actor", s.actor},
                          {"member", s.member}, {"coords", s.coords}, {"host", s.host},
                          {"function", s.function}, {"file", s.file}, {"line", s.line},
                          {"waiting", s.waiting}});
    }
    return jsonLine(sessions);
  }
  Rank rank = 0;
  std::uint64_t session = 0;
  if (!(in >> rank >> session) || (verb != "read" && verb != "send")) {
    throw Error("pdb takes list, read RANK SESSION or send RANK SESSION LINE, not '" + args + "'");
  }
  if (verb == "read") {
    PdbRead read = pdbRead(proc, rank, session, std::chrono::milliseconds(2000));
    return jsonLine({{"output", read.output}, {"waiting", read.waiting}, {"ended", read.ended}});
  }
  std::string line;
  if (in.peek() == ' ') in.get();  // one space before the line; the rest is the line
  std::getline(in, line);
  pdbSend(proc, rank, session, line);
  return "ok\n";
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
  std::thread thread;

  explicit Impl(Proc& owner) : proc(owner) {}

  ~Impl() {
    if (wake[1] >= 0) {
      char byte = 0;
      [[maybe_unused]] ssize_t n = ::write(wake[1], &byte, 1);
    }
    if (thread.joinable()) thread.join();
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
        try {
          answer(client, /*local=*/i == 0);
        } catch (const std::exception& e) {
          sendAll(client, std::string("error: ") + e.what() + "\n");
        }
        ::close(client);
      }
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
    std::string command = line.substr(space + 1);
    if (command == "ping") {
      sendAll(client, "ok\n");
    } else if (command == "status") {
      sendAll(client, encodeStatus(proc));
    } else if (command == "stacks" || command == "stacks native") {
      bool native = command == "stacks native";
      std::vector<Rank> live;
      for (Rank r = 0; r < proc.size(); ++r) {
        if (proc.alive(r)) live.push_back(r);
      }
      auto bound = std::chrono::milliseconds(native ? 10000 : 5000);
      sendAll(client, encodeStacks(collectStacks(proc, live, native, bound)));
    } else if (command.rfind("pdb ", 0) == 0) {
      sendAll(client, answerPdb(proc, command.substr(4)));
    } else {
      sendAll(client, "error: no command '" + command +
                          "' (ping, status, stacks, stacks native, pdb list|read|send)\n");
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
  impl->thread = std::thread([raw] { raw->serve(); });
  log::get().debug("debug server at {}", impl->socketPath);
  return std::unique_ptr<DebugServer>(new DebugServer(std::move(impl)));
}

DebugServer::DebugServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DebugServer::~DebugServer() = default;
const std::string& DebugServer::socketPath() const { return impl_->socketPath; }

}  // namespace crown::debug
