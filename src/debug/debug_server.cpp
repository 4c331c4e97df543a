// The debug server (crown/debug/server.h): one thread, one client at a time,
// each bounded by socket timeouts so that a client that stalls cannot keep
// the next one out for long.
#include "crown/debug/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <span>
#include <thread>

#include <nlohmann/json.hpp>

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
      out += "rank " + std::to_string(r) + " state lost host " + proc.host(r) + "\n";
    }
  }
  for (const auto& one : collectStatus(proc, live, std::chrono::milliseconds(2000))) {
    std::string state = !one.error.empty()        ? "silent"
                        : stopped.count(one.rank) ? "stopped"
                                                  : "alive";
    out += "rank " + std::to_string(one.rank) + " state " + state + " host " + one.host;
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
  int wake[2] = {-1, -1};
  std::thread thread;

  explicit Impl(Proc& owner) : proc(owner) {}

  ~Impl() {
    if (wake[1] >= 0) {
      char byte = 0;
      [[maybe_unused]] ssize_t n = ::write(wake[1], &byte, 1);
    }
    if (thread.joinable()) thread.join();
    for (int fd : {listenFd, wake[0], wake[1]}) {
      if (fd >= 0) ::close(fd);
    }
    if (!socketPath.empty()) ::unlink(socketPath.c_str());
    if (!tokenPath.empty()) ::unlink(tokenPath.c_str());
  }

  void serve() {
    for (;;) {
      pollfd fds[2] = {{listenFd, POLLIN, 0}, {wake[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      int client = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      try {
        answer(client);
      } catch (const std::exception& e) {
        sendAll(client, std::string("error: ") + e.what() + "\n");
      }
      ::close(client);
    }
  }

  void answer(int client) {
    timeval bound{kClientTimeoutSeconds, 0};
    ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
    ucred peer{};
    socklen_t size = sizeof peer;
    if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
        peer.uid != ::geteuid()) {
      sendAll(client, "refused: only the job's own user may connect\n");
      log::get().warn("debug server: refused a connection from uid {}", peer.uid);
      return;
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
  ::unlink(impl->tokenPath.c_str());  // a pid reused after a job that left it behind
  int tokenFd = ::open(impl->tokenPath.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (tokenFd < 0) throw Error("cannot write the debug token " + impl->tokenPath);
  std::string hex = toHex(impl->token) + "\n";
  bool written = ::write(tokenFd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size());
  ::close(tokenFd);
  if (!written) throw Error("cannot write the debug token " + impl->tokenPath);

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
