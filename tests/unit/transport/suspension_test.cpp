// Issue 10: a rank stopped (SIGSTOP) past the heartbeat bound and then
// continued. Its peer rightly takes it for lost; the stopped rank must not
// report, on waking, that its peer fell silent: the silence was its own.
// The stopped side runs in a child process: this binary again, which runs
// stoppedSide() before main when it finds the pipes in its environment.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "crown/transport/transport.h"
#include "support/transport_inbox.h"
#include "transport/shm/shm_backend.h"

namespace crown::transport {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Backend> makeBackend(const std::string& kind, const AsioOptions& options) {
  return kind == "shm" ? shm::makeShmBackend(options) : makeTcpBackend(options);
}

AsioOptions optionsFor(Rank rank, const Secret& secret) {
  AsioOptions options = crown::testing::loopbackOptions(rank, 2, secret);
  options.heartbeatInterval = 20ms;
  options.heartbeatMisses = 6;
  return options;
}

void writeLine(int fd, const std::string& text) {
  std::string line = text + "\n";
  (void)::write(fd, line.data(), line.size());
}

// Reads one line, waiting at most `timeout`.
std::string readLine(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 50) <= 0) continue;
    char c = 0;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return line;
}

// An address on one line of the pipe (the shared-memory one holds a newline).
std::string oneLine(std::string address) {
  std::replace(address.begin(), address.end(), '\n', '\t');
  return address;
}

std::string fromOneLine(std::string line) {
  std::replace(line.begin(), line.end(), '\t', '\n');
  return line;
}

std::string hex(const Secret& secret) {
  std::string out;
  for (auto byte : secret) out += "0123456789abcdef"[byte >> 4], out += "0123456789abcdef"[byte & 15];
  return out;
}

Secret unhex(const std::string& text) {
  Secret secret{};
  for (std::size_t i = 0; i < secret.size(); ++i) {
    secret[i] = static_cast<std::uint8_t>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  }
  return secret;
}

// The child: rank 1, which the parent stops and continues. It reports the
// first loss it sees, or "none".
void stoppedSide(const char* spec) {
  int in = 0, out = 0;
  char secretText[65] = {};
  char kind[8] = {};
  if (std::sscanf(spec, "%d:%d:%64[0-9a-f]:%7s", &in, &out, secretText, kind) != 4) ::_exit(2);
  crown::testing::TransportInbox inbox;
  auto b = makeBackend(kind, optionsFor(1, unhex(secretText)));
  writeLine(out, oneLine(b->address()));
  std::string a = fromOneLine(readLine(in, 5s));
  b->start({a, b->address()}, inbox.callbacks());
  bool lost = inbox.waitFor([&] { return !inbox.lost.empty(); }, 10s);
  std::lock_guard lock(inbox.mutex);
  writeLine(out, lost ? inbox.lostWhy[0].toString() : "none");
}

[[maybe_unused]] const bool kRanAsChild = [] {
  if (const char* spec = std::getenv("CROWN_TEST_SUSPENSION")) {
    stoppedSide(spec);
    ::_exit(0);
  }
  return false;
}();

class Suspension : public ::testing::TestWithParam<std::string> {};

// The shared-memory backend's heartbeats go over its sockets: same contract.
INSTANTIATE_TEST_SUITE_P(Links, Suspension, ::testing::Values("tcp", "shm"));

TEST_P(Suspension, AStoppedRankDoesNotBlameItsPeer) {
  Secret secret = randomSecret();
  int toChild[2], toParent[2];
  ASSERT_EQ(::pipe(toChild), 0);
  ASSERT_EQ(::pipe(toParent), 0);
  std::string spec = std::to_string(toChild[0]) + ":" + std::to_string(toParent[1]) + ":" +
                     hex(secret) + ":" + GetParam();
  pid_t child = ::fork();
  if (child == 0) {
    ::setenv("CROWN_TEST_SUSPENSION", spec.c_str(), 1);
    ::execl("/proc/self/exe", "suspension-child", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  crown::testing::TransportInbox inbox;
  auto a = makeBackend(GetParam(), optionsFor(0, secret));
  std::string b = fromOneLine(readLine(toParent[0], 10s));
  ASSERT_FALSE(b.empty()) << "the child never said where it listens";
  writeLine(toChild[1], oneLine(a->address()));
  a->start({a->address(), b}, inbox.callbacks());
  a->send(1, crown::testing::testMessage(1, std::string("hello")));
  std::this_thread::sleep_for(200ms);  // the link is up, heartbeats flow

  ::kill(child, SIGSTOP);
  EXPECT_TRUE(inbox.waitFor([&] { return !inbox.lost.empty(); }, 5s))
      << "a stopped peer was never taken for lost";
  std::this_thread::sleep_for(300ms);
  ::kill(child, SIGCONT);

  std::string seen = readLine(toParent[0], 10s);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(seen.find("no sign of life"), std::string::npos)
      << "the stopped rank blamed its peer's silence: " << seen;
  EXPECT_NE(seen.find("suspended"), std::string::npos) << "it did not say it had been stopped: " << seen;
}

}  // namespace
}  // namespace crown::transport
